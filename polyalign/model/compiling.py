"""torch.compile as polyalign calls it: one place for the options every compiled graph gets, and regional
compilation of a model's repeated parts (PyTorch's regional compilation recipe): each module class that declares
`compile_regions` (an encoder layer, the MLM head's loss) is compiled once, with `fullgraph=True`, and every
instance of it reuses that graph, so compiling costs one layer, not the whole unrolled model."""

from __future__ import annotations

import torch

INDUCTOR_OPTIONS = {"triton.coalesce_tiling_analysis": False}
"""Inductor's coalescing analysis picks Triton tile shapes; on CUDA it failed an internal assertion
(`tiling_utils.get_pw_red_splits`, on sizes with symbolic dimensions) while compiling a training step and
FlexAttention with XLM-E's gated bias. Without it Inductor tiles as it did before the analysis existed."""

BACKEND = "inductor"
"""The compiler backend of `compile_regions` (tests give a recording one)."""

COMPILER_ERRORS = (torch._dynamo.exc.TorchDynamoException,)
"""What a failure to trace or to compile raises (Inductor's errors derive from it too)."""

FAILED: set[str] = set()
"""Regions (by name, shared by every instance of a class) whose compiling failed: they run eagerly."""


def compiled(fn, **kwargs):
    """`torch.compile(fn, **kwargs)` with INDUCTOR_OPTIONS."""
    return torch.compile(fn, options=dict(INDUCTOR_OPTIONS), **kwargs)


class Region:
    """A bound method compiled on its own (fullgraph) that runs eagerly from the first compiler failure on, after
    one line saying so: a compiler error never ends a run."""

    def __init__(self, eager, name: str, dynamic: bool | None):
        options = {"options": dict(INDUCTOR_OPTIONS)} if BACKEND == "inductor" else {}
        self.eager, self.name = eager, name
        self.compiled = torch.compile(eager, backend=BACKEND, fullgraph=True, dynamic=dynamic, **options)

    @property
    def failed(self) -> bool:
        return self.name in FAILED

    def __call__(self, *args, **kwargs):
        if not self.failed:
            try:
                return self.compiled(*args, **kwargs)
            except COMPILER_ERRORS as error:
                FAILED.add(self.name)
                print(
                    f"note: compiling {self.name} failed ({reason_of(error)}); it runs eagerly from here on "
                    "(trainer.compile=false turns compiling off)",
                    flush=True,
                )
        return self.eager(*args, **kwargs)


def reason_of(error: Exception) -> str:
    """The compiler's own error in a line: a backend's failure wraps it (`inner_exception`)."""
    root = getattr(error, "inner_exception", None) or error
    text = str(root).strip()
    return f"{type(root).__name__}: {text.splitlines()[0][:200]}" if text else type(root).__name__


def compile_regions(module: torch.nn.Module, dynamic: bool | None = None) -> int:
    """Compile, in place, every region that `module`'s submodules declare (`compile_regions`: method names); each
    region's graph is shared by all instances of its class (their parameters are inputs). `dynamic`: True for
    rows whose shapes change from batch to batch (unpacked), None to let the compiler specialise (packed rows of a
    fixed size). Returns the number of regions."""
    count = 0
    for sub in module.modules():
        for method in getattr(type(sub), "compile_regions", ()):
            if isinstance(getattr(sub, method), Region):
                continue
            name = f"{type(sub).__name__}.{method}"
            FAILED.discard(name)  # a new run tries again
            setattr(sub, method, Region(getattr(sub, method), name, dynamic))
            count += 1
    return count


def compiled_regions(module: torch.nn.Module) -> list[Region]:
    """The regions `compile_regions` compiled in `module`."""
    return [r for sub in module.modules() for r in vars(sub).values() if isinstance(r, Region)]
