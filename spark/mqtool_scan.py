"""``spark-submit spark/mqtool_scan.py PATH... --output DIR`` (docs/spark.md): parses arguments for ``mqtool.spark.job``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

LOG_CONFIG = Path(__file__).resolve().with_name("log4j2.properties")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqtool_scan.py", description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="*", metavar="PATH", help="store roots, commitlog folders or segment files")
    p.add_argument("--output", "-o", metavar="DIR", help="output directory (local path or any Hadoop URI)")
    p.add_argument("--mode", choices=("messages", "stats", "verify"), default="messages")
    p.add_argument("--format", choices=("parquet", "json", "csv"), default="parquet")
    p.add_argument("--topic", action="append", default=[], help="only this topic (repeatable)")
    p.add_argument("--queue", type=int, help="only this queue id")
    p.add_argument("--key", help="only messages whose KEYS contain this key")
    p.add_argument("--tag", help="only messages with this TAGS value")
    p.add_argument("--since", help="store time at or after (epoch ms or ISO-8601; naive = UTC)")
    p.add_argument("--until", help="store time at or before")
    p.add_argument("--uniq-key", metavar="KEY", help="only messages with this UNIQ_KEY")
    p.add_argument("--msg-id", metavar="ID", help="only the message with this offsetMsgId (its split alone is read)")
    p.add_argument("--from-offset", type=int, metavar="OFFSET",
                   help="commit log offset to start at: the record there or the next one (only the splits from there are read)")
    p.add_argument("--to-offset", type=int, metavar="OFFSET", help="stop before this commit log offset (exclusive)")
    p.add_argument("--split-size", metavar="SIZE", help="split segments into ranges of SIZE (e.g. 256m); default: one per segment, smaller only when there are too few segments for the cores")
    p.add_argument("--body", choices=("none", "utf8", "hex", "base64", "sha256"), default="none", help="messages: how to write the body bytes")
    p.add_argument("--broker-name", action="append", default=[], metavar="NAME", help="broker column value, one per PATH or one for all (default: the store directory's name)")
    p.add_argument("--broker-version", action="append", default=[], metavar="X.Y.Z", help="version of the broker that wrote the store (default: detected)")
    p.add_argument("--broker-config", metavar="FILE", help="the brokers' broker.conf (file sizes, delay levels)")
    p.add_argument("--writer", choices=("auto", "python", "spark"), default="auto", help="messages: who writes Parquet: python (each task, with pyarrow; the default for a path), spark (Spark's writer; the default for JSON, CSV and URIs)")
    p.add_argument("--keep-going", action="store_true",
                   help="read past every damaged range (messages, stats: as mqtool dump --keep-going; verify: as mqtool verify)")
    p.add_argument("--verbose", action="store_true", help="keep Spark's INFO logging (default: WARN, from log4j2.properties next to this script)")
    p.add_argument("--debug", action="store_true", help="show the whole error (Spark and Python tracebacks) instead of one line")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import mqtool  # noqa: F401
    except ImportError:
        print("mqtool-scan: error: this Python cannot import mqtool: install it (pip install -e '.[spark]')", file=sys.stderr)
        return 3
    if not args.paths or not args.output:
        parser().error("PATH and --output are required")
    from mqtool.spark import job  # pyspark's Python side only: no JVM yet

    prepared = job.prepare_args(args)  # a wrong argument or path is one line before the JVM starts (seconds)
    if isinstance(prepared, int):
        return prepared
    set_log_level(verbose=args.verbose)
    return job.main(args, prepared)


def set_log_level(*, verbose: bool) -> None:
    """Spark logs at WARN unless ``verbose``, log4j2.properties loaded over spark-submit's reset; a user's own left alone."""
    import os

    from pyspark import SparkContext

    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    under_submit = SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" in os.environ
    if SparkContext._gateway is None and not under_submit and not verbose:
        if "log4j2.configurationFile" not in submit_args and LOG_CONFIG.is_file():
            os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-java-options=-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()} {submit_args}"
    try:
        SparkContext._ensure_initialized()
    except Exception:  # noqa: BLE001 - no JVM: the job reports that failure in its own words
        return
    jvm = SparkContext._jvm
    system = jvm.java.lang.System
    if under_submit and not verbose and LOG_CONFIG.is_file() and system.getProperty("log4j2.configurationFile") is None:
        # Spark's logging initialised now (its defaults; the line announcing them hidden), then
        # log4j2.properties loaded: Spark finds itself initialised and keeps that configuration
        err = system.err
        system.setErr(jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream()))
        try:
            jvm.org.apache.spark.SparkConf().initializeLogIfNecessary(False)
            initialised = True
        except Exception:  # noqa: BLE001 - another Spark: its own logging, as before
            initialised = False
        finally:
            system.setErr(err)
        if initialised:
            jvm.org.apache.logging.log4j.LogManager.getContext(False).setConfigLocation(jvm.java.net.URI(LOG_CONFIG.as_uri()))
    if system.getProperty("spark.log.level") is None:
        system.setProperty("spark.log.level", "INFO" if verbose else "WARN")


if __name__ == "__main__":
    sys.exit(main())
