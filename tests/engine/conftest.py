"""The read layer's demo dumps (real dumps of the demo MoE block), shared with the engine tests."""

from tests.read.conftest import counting_store, demo_dumps, truncated_dump  # noqa: F401
