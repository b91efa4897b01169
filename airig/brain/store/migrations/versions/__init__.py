"""The store's revisions, one file each: ``NNNN_slug.py`` (``revisions.py``; AGENTS.md,
"How to change the store's schema"). A package, so that a wheel ships them however its
packages are found."""
