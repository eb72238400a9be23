"""The columnar scan every reader of messages reads through (``batches.py``, ``schema.py``, ``filter.py``)."""
