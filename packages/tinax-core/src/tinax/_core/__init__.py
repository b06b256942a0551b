"""Internals shared by the tinax distributions.

Nothing here is public API. Sibling distributions depend on ``tinax-core``
with a bounded version range and may import these modules; applications
should not.
"""
