"""Saves: the checks made before one starts, the Orbax save, and the response that completes it."""
