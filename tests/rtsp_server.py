"""A loopback RTSP camera for tests: GStreamer's RTSP server serving an H.264 .mp4 at rtsp://127.0.0.1:PORT/cam.

Run with the system Python (it has python3-gi): /usr/bin/python3 rtsp_server.py CLIP.mp4 PORT
"""

import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

clip, port = sys.argv[1], sys.argv[2]
Gst.init(None)
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service(port)
factory = GstRtspServer.RTSPMediaFactory()
factory.set_launch(f"( filesrc location={clip} ! qtdemux ! h264parse ! rtph264pay name=pay0 pt=96 config-interval=1 )")
factory.set_shared(True)
server.get_mount_points().add_factory("/cam", factory)
server.attach(None)
print("ready", flush=True)
GLib.MainLoop().run()
