"""The durable service around the engine: the scheduling loop and what it drives.

Each cycle the loop syncs the JobDb with the store, applies what backends and users reported
(``transitions``), keeps the lease (``leadership``), builds the engine's snapshot
(``snapshots``), runs the engine (``flotilla.scheduler``) and writes its decisions back
(``commit``, then ``dispatch`` to the backends). The engine knows nothing of the store; this
package is where the two meet.
"""
