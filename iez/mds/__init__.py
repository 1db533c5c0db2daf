"""The MDS control loop (paper III-B): collect OSS agents' reports over ZeroMQ,
keep a live view of every OST, and allocate pending write requests with it.

- :mod:`iez.mds.messages`: decoding and validating one agent message;
- :mod:`iez.mds.view`: the live view (staleness, free space, I/O congestion, OST states and pools);
- :mod:`iez.mds.lustre_params`: the MDS node's own Lustre parameters (pools, osp states, reserved space);
- :mod:`iez.db.ingest` (in the DB layer): writing reports to the interaction DB in batches;
- :mod:`iez.mds.resources`: the MDS node's own CPU and memory (allocation gate);
- :mod:`iez.mds.service`: the loop that ties them together (``iez mds``).
"""
