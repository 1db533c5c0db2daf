"""The file inventory (issue 24, item 4): every file's size, layout and owner in the interaction DB, so plans,
drains and the balancing service never walk the tree.

- :mod:`iez.inventory.tables`: the tables (files by FID, directories, stripe objects, changelog positions);
- :mod:`iez.inventory.store`: batched upserts and deletes (their statements are :mod:`iez.db.inventory`'s), and
  paths resolved from directory rows;
- :mod:`iez.inventory.scan`: the seeding scan, parallel over top-level subtrees;
- :mod:`iez.inventory.changelog`: Lustre's ``lfs changelog`` text records, parsed strictly;
- :mod:`iez.inventory.readers`: where records come from (``lfs changelog`` or the emulated MDT's log) and
  how they are cleared;
- :mod:`iez.inventory.consumer`: applies records in order, commits its position with them, clears, rescans
  on a hole;
- :mod:`iez.inventory.emulated_mdt`: the emulated MDT writing those records from inotify;
- :mod:`iez.inventory.source`: what the rebalancer plans from (per-OST totals in SQL, candidates only).
"""
