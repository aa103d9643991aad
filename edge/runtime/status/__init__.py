"""What a run counts and says about itself, read by both the schedule (which counts) and the outputs (which show)."""
