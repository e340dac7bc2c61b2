"""The files of one version: opening data files, deletion vectors, row lineage and the
row-id index."""
