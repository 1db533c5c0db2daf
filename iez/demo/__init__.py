"""``iez demo``: the whole control plane on embedded defaults, as real processes.

:mod:`iez.demo.services` starts and stops the MDS, the emulated cluster (with
its agents) and the API; :mod:`iez.demo.writers` is the application (an MPI
program under ``mpirun`` when MPI is installed, else a multi-process Python
writer); :mod:`iez.demo.pipeline` runs the steps and measures the result.
"""
