"""The columnar scan every reader of messages (``dump``, ``stats``, Spark) reads through: Arrow batches built by compiled kernels
(``batches.py``), their schema (``schema.py``) and the one filter (``filter.py``). Imports pyarrow, never pyspark."""
