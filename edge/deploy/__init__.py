"""Putting engines on devices: the systemd service (`edge service`) and verified, atomic deploys (`edge deploy`).

``target`` is the device side (standard library only, piped to the device's python3); ``cli`` drives it over SSH.
Imports no build-side package; ``target`` imports nothing from edge at all.
"""
