"""Plans: parsing (JSON, YAML, Markdown), validation, and storing them as tasks.

The formats are documented in ``airig/brain/PLANS.md``; the Markdown format in
``airig.brain.plans.markdown``.
"""
