"""The training checkpoint manager: its steps, its root on storage, and how its processes agree."""
