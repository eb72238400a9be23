"""The columnar scan: Arrow record batches of decoded message fields built by compiled kernels
(``batches.py``, ``_kernels.pyx``), their schema (``schema.py``) and the one filter (``filter.py``).
Every reader of messages (``dump``, ``stats``, Spark, ...) reads through it. Imports pyarrow, never pyspark."""
