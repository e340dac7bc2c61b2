"""lance_sql.memwal: MemWAL (LSM) tables — regions, the region writer and background jobs.

The design lives in the "MemWAL (LSM) design" section of the project's DESIGN.md and the
format in the MemWAL specification (``spec/memwal.md`` in the shared specifications).
So far: region specs (values in :mod:`lance_sql.format.region_spec`), their transforms
evaluated over Arrow data
(:mod:`.transforms`), the murmur3 hashing behind ``bucket`` (:mod:`.murmur3`), where a
region's files live (:mod:`.naming`), the primary-key bloom filter (:mod:`.bloom`), region
manifests (:mod:`.region_log`), WAL entries (:mod:`.wal`), the MemTable (:mod:`.memtable`)
and the region writer (:mod:`.writer`).
"""

from lance_sql.format.region_spec import RegionField, RegionSpec
from lance_sql.memwal.writer import RegionWriter, WriterConfig, open_memtables, open_writers

__all__ = ["RegionField", "RegionSpec", "RegionWriter", "WriterConfig", "open_memtables",
           "open_writers"]
