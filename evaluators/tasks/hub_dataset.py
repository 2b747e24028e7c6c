"""A task's dataset from the Hugging Face hub, or from a local folder in the hub's layout: loaded through
`datasets.load_dataset`, its absence a ConfigError that says how to get it, its local copies hidden from agents.

A task over a hub dataset keeps one HubDataset and hands it its missing_data() and hidden_paths(); loading is lazy
(the first `splits` read) and happens once per task.
"""
from __future__ import annotations

from functools import cached_property
from pathlib import Path

from contracts.specs import ConfigError


class HubDataset:
    def __init__(self, task: str, dataset: str, config: str | None, data_path: str | None,
                 splits: tuple[str, ...] = ("train", "test"), columns: tuple[str, ...] = (), offline: str = "",
                 label: str = ""):
        """task: the task's name (for errors); dataset / config: the hub id and config; data_path: a local folder in
        the hub's layout instead (`<config>/<split>-*.parquet`, or the split files at its top, or .jsonl); splits /
        columns: what the task reads (checked at load); offline: what to do without the network, and label: the data's
        name, for errors."""
        self.task, self.dataset, self.config = task, dataset, config
        self.data_path = Path(data_path).expanduser().resolve() if data_path else None
        self.split_names, self.columns, self.offline = tuple(splits), tuple(columns), offline
        self.label = label or dataset
        if self.data_path is not None and not self.data_path.is_dir():
            raise ConfigError(self._missing(f"data_path={data_path!r} is not a folder"))

    def _missing(self, why: str) -> str:
        config = f" ({self.config})" if self.config else ""
        layout = " and ".join(f"{self.config or '.'}/{split}-*.parquet" for split in self.split_names)
        hint = f"; offline, {self.offline}" if self.offline else ""
        return (f"task {self.task}: no {self.label} data: {why}. Fetch {self.dataset}{config} once where the hub is "
                f"reachable (datasets.load_dataset({self.dataset!r}, {self.config!r}) fills the Hugging Face cache), "
                f"or set task.data_path=DIR holding {layout}{hint}")

    @cached_property
    def splits(self):
        """The loaded dataset's splits (a datasets.DatasetDict), checked for the splits and columns the task reads."""
        import datasets

        try:
            if self.data_path is None:
                loaded = datasets.load_dataset(self.dataset, self.config)
            elif self.config and (self.data_path / self.config).is_dir():
                loaded = datasets.load_dataset(str(self.data_path), data_dir=self.config)
            else:  # the split files at the folder's top
                loaded = datasets.load_dataset(str(self.data_path))
        except Exception as e:  # offline without a cached copy, no such folder, files of another layout
            raise ConfigError(self._missing(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")) \
                from None
        for split in self.split_names:
            if split not in loaded or not set(self.columns) <= set(loaded[split].column_names):
                columns = " and ".join(f"`{c}`" for c in self.columns)
                raise ConfigError(self._missing(f"{self.data_path or self.dataset} has no {split} split with "
                                                f"{columns} columns (splits: {list(loaded)})"))
        return loaded

    def missing_data(self) -> list[str]:
        """A local copy: every split's files are there. A dataset id: the Hugging Face caches hold it (else it
        downloads at first use, which needs the network). Cheap: nothing is loaded."""
        if self.data_path is not None:
            folder = self.data_path / self.config if self.config else self.data_path
            folder = folder if folder.is_dir() else self.data_path
            absent = [split for split in self.split_names if not any(folder.rglob(f"{split}*"))]
            return [self._missing(f"{folder} has no {' and no '.join(absent)} files")] if absent else []
        if any(path.exists() for path in self.hidden_paths()):
            return []
        hint = f"; offline, set task.data_path=DIR or {self.offline}" if self.offline else \
            "; offline, set task.data_path=DIR"
        config = f" ({self.config})" if self.config else ""
        return [f"task {self.task}: {self.dataset}{config} is not in the Hugging Face cache: it downloads at first "
                f"use (needs the network){hint}"]

    def hidden_paths(self) -> list[Path]:
        """The local copy, or this dataset's entries in the Hugging Face caches (they hold the hidden split too)."""
        if self.data_path is not None:
            return [self.data_path]
        import datasets.config
        from huggingface_hub import constants

        return [Path(constants.HF_HUB_CACHE) / f"datasets--{self.dataset.replace('/', '--')}",
                Path(datasets.config.HF_DATASETS_CACHE) / self.dataset.replace("/", "___")]
