"""lance_sql.memwal: MemWAL (LSM) tables — regions, the region writer and background jobs.

The design lives in the "MemWAL (LSM) design" section of the project's DESIGN.md and the
format in the MemWAL specification (``spec/memwal.md`` in the shared specifications).
Start at ``ds.initialize_mem_wal(...)`` / ``ds.mem_wal`` (:class:`MemWalDataset`,
:mod:`.dataset`, what ``lance_sql.dataset`` returns) and the :class:`MemWal` handle
(:mod:`.api`). Underneath: region specs (values in
:mod:`lance_sql.format.region_spec`) evaluated over Arrow data (:mod:`.transforms`,
:mod:`.murmur3`), routing rows to regions (:mod:`.routing`), where a region's files live
(:mod:`.naming`), region manifests (:mod:`.region_log`), WAL entries (:mod:`.wal`), the
MemTable (:mod:`.memtable`) and its bloom filter (:mod:`.bloom`), the region writer
(:mod:`.writer`), each generation's primary-key index (:mod:`.pk_index`), and the jobs:
:mod:`.merger`, :mod:`.index_builder`, :mod:`.gc`.
"""

from lance_sql.format.region_spec import RegionField, RegionSpec
from lance_sql.memwal.api import MemWal, RoutingWriter
from lance_sql.memwal.dataset import MemWalDataset
from lance_sql.memwal.writer import RegionWriter, WriterConfig, open_memtables, open_writers

__all__ = ["MemWal", "MemWalDataset", "RegionField", "RegionSpec", "RegionWriter",
           "RoutingWriter", "WriterConfig", "open_memtables", "open_writers"]
