"""The brain's store: the database, its writes, and what it records."""
