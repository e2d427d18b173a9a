"""In-memory jobs with write transactions and cheap read snapshots, synced from the store."""

from flotilla.jobdb.jobdb import JobDb, ReadTxn, WriteTxn

__all__ = ["JobDb", "ReadTxn", "WriteTxn"]
