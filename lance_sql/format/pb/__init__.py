"""Generated protobuf modules (see scripts/gen_protos.py). Do not edit."""
