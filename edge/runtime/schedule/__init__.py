"""When each frame runs where: the threaded pipeline of one source and one engine, and the pool that spreads many
sources over the GPU and the DLA cores."""
