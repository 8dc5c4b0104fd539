"""tf.data internals: a copy of a dataset that can be read without disturbing it.

Reading a `tf.data.Dataset` is not free of effects on later reads of the same
object. `shuffle(..., reshuffle_each_iteration=True)` (the default), `Dataset.random`
and `sample_from_datasets(..., rerandomize_each_iteration=True)` hold a seed
generator resource (`SeedGenerator`) in the dataset: every new iterator draws
the next seeds from it, so one extra read changes the order of every later
epoch. `cache()` holds a `MemoryCache` resource that the first complete read
fills. `warm_up` must find the batch shapes of the dataset `fit` will train on
without either effect.

`detached_copy` serializes the dataset (`DatasetToGraphV2`), renames those
resource handles in the graph and builds a new dataset from it
(`DatasetFromGraph`): TensorFlow's shuffle, random and cache kernels find no
resource under the new name and create their own, seeded with the dataset's
own seeds, so the copy reads what the original's first epoch would read and
the original is left as it was. Variables that map functions capture
(`tf.random.Generator`) are serialized by value and become the copy's own.
Both behaviours are kernel internals, so the first use in a process probes
them on a small shuffled, cached dataset; when the probe fails, the copy is
refused with a reason naming the TensorFlow version.

What a copy cannot separate, it refuses: datasets that write files
(`snapshot`, `save`) or consume a shared tf.data service job, and resource
handles of any other kind. A file `cache(filename)` becomes an in-memory
cache in the copy, so the copy never touches the cache files. Python code in
the pipeline (`from_generator`, `py_function`, `numpy_function`) is the same
Python code in the copy: `DetachedCopy.runs_python` says so, for the caller
to keep Python's own state.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any

__all__ = ["DetachedCopy", "detached_copy"]

# Resource types whose state iterators share, by the substring of the C++
# type name a handle carries (`maybe_type_name`, e.g.
# "N10tensorflow4data13SeedGeneratorE", "N10tensorflow4data11MemoryCacheE").
_PER_DATASET_STATE = ("SeedGenerator", "MemoryCache")
_WRITES_FILES = ("SnapshotDataset", "SnapshotDatasetV2", "SaveDataset", "SaveDatasetV2", "DistributedSave")
_SHARED_SOURCE_PREFIX = "DataServiceDataset"
_FILE_CACHES = ("CacheDataset", "CacheDatasetV2")
_RUNS_PYTHON = ("PyFunc", "PyFuncStateless", "EagerPyFunc")
# DatasetToGraphV2's `external_state_policy`: serialize stateful functions
# anyway; what they touch is checked here.
_POLICY_IGNORE = 1

_renames = itertools.count()


@dataclass(frozen=True)
class DetachedCopy:
    """A copy of a dataset whose reading leaves the original alone, or why there is none.

    Attributes:
        dataset: The copy, or `None` when it cannot be made safely.
        runs_python: Whether reading it calls Python code of the pipeline
            (a generator, `py_function`, `numpy_function`): that code is
            shared with the original.
        reason: Why there is no copy (`None` when there is one).
    """

    dataset: Any
    runs_python: bool = False
    reason: str | None = None


def detached_copy(dataset: Any) -> DetachedCopy:
    """Returns a copy of `dataset` that can be read without changing what `dataset` yields later.

    Args:
        dataset: A `tf.data.Dataset`.

    Returns:
        A `DetachedCopy`; its `dataset` is `None`, with a `reason`, when the
        pipeline writes files, reads a shared service or holds state this
        TensorFlow cannot copy, or when the probe of this TensorFlow failed.
    """
    problem = _probe()
    if problem is not None:
        return DetachedCopy(None, reason=problem)
    return detached_copy_unprobed(dataset)


def detached_copy_unprobed(dataset: Any) -> DetachedCopy:
    """`detached_copy` without the probe (the probe's own building block)."""
    try:
        graph = _graph_of(dataset)
    except Exception as e:  # noqa: BLE001 - e.g. a pipeline over 2 GB of in-memory tensors
        return DetachedCopy(None, reason=f"it could not be serialized to copy it ({_first_line(e)})")
    reason, runs_python = _detach(graph)
    if reason is not None:
        return DetachedCopy(None, reason=reason)
    try:
        copy = _dataset_from(graph, dataset.element_spec)
    except Exception as e:  # noqa: BLE001 - whatever refuses the copy, the caller is told why
        return DetachedCopy(None, reason=f"its copy could not be built ({_first_line(e)})")
    return DetachedCopy(copy, runs_python=runs_python)


def _graph_of(dataset: Any) -> Any:
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    serialized = tf.raw_ops.DatasetToGraphV2(
        input_dataset=tf.data.experimental.to_variant(dataset),
        external_state_policy=_POLICY_IGNORE,
        strip_device_assignment=False,
    )
    graph = graph_pb2.GraphDef()
    graph.ParseFromString(serialized.numpy())
    return graph


def _dataset_from(graph: Any, element_spec: Any) -> Any:
    import tensorflow as tf

    variant = tf.raw_ops.DatasetFromGraph(graph_def=graph.SerializeToString())
    return tf.data.experimental.from_variant(variant, element_spec)


def _detach(graph: Any) -> tuple[str | None, bool]:
    """Renames per-dataset state in `graph` (in place); (why it cannot be copied, whether it runs Python)."""
    import tensorflow as tf

    resource = tf.resource.as_datatype_enum
    nodes = list(graph.node)
    function_nodes = [node for function in graph.library.function for node in function.node_def]
    by_name = {node.name: node for node in nodes}
    for node in [*nodes, *function_nodes]:
        if node.op in _WRITES_FILES:
            return f"it writes files ({node.op})", False
        if node.op.startswith(_SHARED_SOURCE_PREFIX):
            return f"it reads a shared tf.data service job ({node.op})", False
    for node in function_nodes:
        if node.op in _FILE_CACHES:
            return f"a function in it caches to a file ({node.op})", False
    for node in nodes:
        if node.op in _FILE_CACHES and len(node.input) > 1:
            filename = by_name.get(node.input[1].split(":")[0])
            if filename is None or filename.op != "Const":
                return f"its cache file name is computed ({node.op})", False
            # An in-memory cache in the copy: the cache files stay untouched.
            filename.attr["value"].tensor.string_val[:] = [b""]
        if node.op == "Const" and node.attr["dtype"].type == resource:
            for handle in node.attr["value"].tensor.resource_handle_val:
                if not any(kind in handle.maybe_type_name for kind in _PER_DATASET_STATE):
                    return (
                        f"it holds a resource the copy would share ({handle.maybe_type_name or handle.name})",
                        False,
                    )
                handle.name = f"{handle.name}/keras_xla_guard_copy_{next(_renames)}"
    runs_python = any(node.op in _RUNS_PYTHON for node in [*nodes, *function_nodes])
    return None, runs_python


@functools.cache
def _probe() -> str | None:
    """Whether this TensorFlow's copies leave the original alone; the reason when not."""
    import tensorflow as tf

    def epoch(dataset: Any) -> list[int]:
        return [int(v) for batch in dataset for v in batch.numpy()]

    def shuffled() -> Any:
        return tf.data.Dataset.range(16).shuffle(16, seed=11).batch(4)

    runs = [0]

    def count(x: Any) -> Any:
        runs[0] += 1
        return x

    try:
        # An original read once already: its next epoch uses its second seeds.
        original, twin = shuffled(), shuffled()
        twin_epochs = [epoch(twin), epoch(twin)]
        epoch(original)
        copy = detached_copy_unprobed(original)
        if copy.dataset is None or epoch(copy.dataset) != twin_epochs[0] or epoch(original) != twin_epochs[1]:
            return (
                f"TensorFlow {tf.__version__}: reading a copy of a shuffled dataset "
                "changed the original's order"
            )
        # The copy fills a cache of its own: the original still reads its input once.
        cached = tf.data.Dataset.range(4).map(lambda x: tf.py_function(count, [x], tf.int64)).cache()
        copy = detached_copy_unprobed(cached)
        if copy.dataset is None:
            return f"TensorFlow {tf.__version__}: a cached dataset cannot be copied ({copy.reason})"
        list(copy.dataset)
        list(cached)
        if runs[0] != 8:
            return f"TensorFlow {tf.__version__}: a copy of a cached dataset shares the original's cache"
    except Exception as e:  # noqa: BLE001 - an API TensorFlow removed or changed
        return f"TensorFlow {tf.__version__}: tf.data datasets cannot be copied ({_first_line(e)})"
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
