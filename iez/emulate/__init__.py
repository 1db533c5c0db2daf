"""An emulated Lustre cluster for machines without Lustre: one parameter tree
per OSS, shaped like ``/proc/fs/lustre``, whose free space follows the files
written with emulated layouts, read by real ``iez-agent`` processes."""
