"""What a checkpoint's files say without loading it: the layout check and the abstract state."""
