"""The brain's HTTP edge: the app, its fast path, auth and the routes."""
