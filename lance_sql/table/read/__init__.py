"""Reading a version: scan plans, the scanner, taking rows and blobs."""
