"""One data set served epoch by epoch to the C++ engine as a BatchSource, from its plan (plan.py): gpucore's own
batch sources for tensors and image files (batch_source), torch's DataLoader for a torch Dataset, the caller's
DataLoader as it is."""
from __future__ import annotations

import itertools
import queue
import threading
from typing import List, Optional, Tuple

import torch

from .. import _C
from .. import transforms as transforms_list
from ..errors import ConfigError
from .clip_sequences import ClipSequences, LengthBatches
from .image_files import ImageFiles
from .plan import DataPlan, plan_data
from .tensor_inputs import as_images, prepare_inputs
from .torch_samples import dataset_samples, describe


def batch_source(plan: DataPlan, *, batch_size: int, shuffle: bool, drop_last: bool, seed: int,
                 device: torch.device, prefetch: int = 4, dtype: torch.dtype = torch.float32,
                 channels_last: bool = False) -> _C.EpochBatches:
    """The C++ source of a plan's data ((inputs, targets) tensors or ImageFiles), placed by its cache.

    Images (N x C x H x W, or uint8 N x H x W) stay as they are (uint8: a quarter of float32's memory); each batch
    goes through the plan's transforms, is scaled and normalised on the training device, as `dtype` (float32,
    float16, bfloat16), channels-last if asked. Other inputs are standardised once here.
    """
    data = plan.data
    transform = _C.AugmentConfig()  # for images; other inputs get none
    transform.enabled = True
    transform.dtype, transform.channels_last = dtype, channels_last
    if plan.normalization is not None:
        transform.mean, transform.std = plan.normalization
    transform.transforms = transforms_list.specs(plan.transforms)
    if isinstance(data, ImageFiles) and (plan.cache == "none" or plan.own_sizes):
        # Streamed, or cached at their own sizes: each image (decoded, or taken from memory) goes through the list's
        # per-image transforms on a reader thread; the rest of the list runs on the batch.
        config = _C.FileBatchesConfig()
        config.channels = data.channels
        config.height, config.width = (0, 0) if plan.own_sizes else data.image_shape()[1:]
        config.resize = data.size != (0, 0)
        config.threads, config.prefetch, config.skip_errors = data.threads, prefetch, data.skip_errors
        config.exif_orientation = data.exif_orientation
        config.own_sizes = plan.own_sizes
        config.decode = data.decode
        images = data.images_at_own_size() if plan.own_sizes and plan.cache != "none" else []
        segmentation = data.mask_paths is not None  # the masks are read with their images, batch by batch
        return _C.FileBatches(data.paths, None if segmentation else data.targets, batch_size, shuffle, drop_last,
                              seed, device, transform, config, data.mask_paths or [], images,
                              data.mask_table if segmentation else None)
    inputs, targets = (data.inputs, data.targets) if isinstance(data, ImageFiles) else data
    inputs = as_images(inputs)
    if inputs.dim() != 4:
        transform, inputs = _C.AugmentConfig(), prepare_inputs(inputs, plan.normalization)
    return _C.TensorBatches(inputs, targets, batch_size, shuffle, drop_last, seed, device, transform,
                            resident=plan.cache == "device")


def check_whole_batches(first_sample: int, batch_size: int, world_size: int, epoch: int) -> int:
    """This rank's whole batches of `batch_size` before sample `first_sample` of epoch `epoch`: where a torch loader,
    which can only skip batches, resumes. ConfigError when the position falls inside a batch."""
    batches, rest = divmod(first_sample, batch_size * world_size)
    if rest:
        raise ConfigError(f"data position: sample {first_sample} of epoch {epoch} is not a whole number of batches of "
                          f"{batch_size} x {world_size} processes: a checkpoint of another batch size or world "
                          "size? (a torch Dataset or DataLoader resumes only at its own)")
    return batches


class EpochData:
    """One data set, served epoch by epoch as a C++ BatchSource, as its plan says. A training set is this process's
    shard of `world_size` (rank `rank`)."""

    def __init__(self, plan: DataPlan, batch_size: int, *, seed: int, shuffle: bool = False, drop_last: bool = False,
                 prefetch: int = 4, rank: int = 0, world_size: int = 1,
                 sampling_weights: Optional[torch.Tensor] = None):
        """`sampling_weights` (float64, one per sample; config key sampler balanced): each epoch's order is that many
        draws with replacement by these weights, from the same (seed, epoch) generator the shuffle draws from."""
        self.plan, self.batch_size = plan, batch_size
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self._settings = dict(seed=seed, shuffle=shuffle, drop_last=drop_last, prefetch=prefetch, rank=rank,
                              world_size=world_size, sampling_weights=sampling_weights)
        self._tensors = self._loader = self._generator = self._sampler = self._served = None
        self.current = None  # the batch source of the epoch started last (epoch())
        data = plan.data
        self.device = plan.device
        if plan.native:
            self._tensors = batch_source(plan, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed,
                                         device=torch.device(self.device), prefetch=prefetch)
            if plan.training:  # this rank's share from the start: total_batches() counts the shard's batches
                if sampling_weights is not None:
                    self._tensors.set_sampling_weights(sampling_weights)
                self._tensors.set_shard(rank, world_size)
                self._tensors.start_epoch(0)
        elif isinstance(data, torch.utils.data.DataLoader):
            self._loader = data  # the user's loader batches itself
        else:  # a torch Dataset's samples (DatasetSamples) or clips, transformed as the plan says, by torch's loader
            self._served = data.served(plan.transforms, plan.normalization, seed)
            if plan.training and isinstance(data, ClipSequences) and data.batch_by_length:
                self._loader = self._length_batches(data, batch_size, shuffle, drop_last, seed, world_size,
                                                    sampling_weights)
                return
            if sampling_weights is not None and world_size > 1:
                raise ConfigError(f"config key 'sampler': balanced draws a torch Dataset's samples in one process "
                                  f"only, not {world_size}: leave sampler out, or train on image folders or tensors, "
                                  "which gpucore's own batch sources shard")
            if sampling_weights is not None:  # torch.multinomial, drawn as the native sources draw it
                self._generator = torch.Generator()
                self._sampler = torch.utils.data.WeightedRandomSampler(sampling_weights, len(sampling_weights),
                                                                       generator=self._generator)
            elif plan.training and world_size > 1:  # equal shards per rank, reshuffled per epoch by set_epoch
                self._sampler = torch.utils.data.distributed.DistributedSampler(
                    data, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
            elif shuffle:  # its own generator: the loader draws its workers' seed from the loader's before the order
                self._generator = torch.Generator()
                self._sampler = torch.utils.data.RandomSampler(self._served, generator=self._generator)
            self._loader = torch.utils.data.DataLoader(self._served, batch_size=batch_size, sampler=self._sampler,
                                                       drop_last=drop_last, collate_fn=self._served.collate,
                                                       generator=torch.Generator().manual_seed(seed),
                                                       pin_memory=str(self.device).startswith("cuda"))

    def _length_batches(self, data, batch_size: int, shuffle: bool, drop_last: bool, seed: int, world_size: int,
                        sampling_weights) -> torch.utils.data.DataLoader:
        """Clips batched with clips of similar lengths (data_kwargs batch_by_length), the batches drawn per (seed,
        epoch) by LengthBatches (the sampler: set_epoch)."""
        if world_size > 1 or sampling_weights is not None:
            raise ConfigError("data_kwargs batch_by_length batches clips in one process without config key sampler: "
                              f"leave it out to train in {world_size} processes or with sampler balanced")
        self._sampler = LengthBatches(data.lengths(), batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed)
        return torch.utils.data.DataLoader(self._served, batch_sampler=self._sampler, collate_fn=self._served.collate,
                                           pin_memory=str(self.device).startswith("cuda"))

    def with_batch_size(self, batch_size: int) -> "EpochData":
        """The same plan served in batches of `batch_size` (an out-of-memory retry halves it)."""
        return EpochData(self.plan, batch_size, **self._settings)

    @property
    def data(self):
        """The data set served: (inputs, targets) tensors, gpucore image files, a torch Dataset or DataLoader."""
        return self.plan.data

    @property
    def own_sizes(self) -> bool:
        return self.plan.own_sizes

    @property
    def description(self) -> str:
        return self.plan.description

    @property
    def fixed_batch_size(self) -> bool:
        """The user's DataLoader batches itself."""
        return isinstance(self.plan.data, torch.utils.data.DataLoader)

    def skipped_files(self) -> List[str]:
        """Image files left out so far, "path: why": never decoded, unreadable at decode, or while streaming."""
        return skipped_files(self.plan.data, self._tensors)

    def total_batches(self) -> int:
        return len(self._tensors) if self._tensors is not None else len(self._loader)

    @property
    def reshards(self) -> bool:
        """Whether the rest of an epoch can be served from any sample on, at any world size (gpucore's sources)."""
        return self._tensors is not None

    def epoch(self, epoch: int, first_sample: int = 0):
        """Epoch `epoch`'s batches from sample `first_sample` of its order over all ranks on (a resume
        mid-epoch): gpucore's sources shard the rest among this run's ranks; a torch loader skips whole
        batches, at the world size and batch size that consumed them. The source is also `current` until the next
        epoch or close()."""
        if self._tensors is not None:
            if self.plan.training:
                self._tensors.set_shard(self.rank, self.world_size, first_sample)
            self._tensors.start_epoch(epoch)
            self.current = self._tensors
            return self.current
        self.current = _C.PythonBatches(self._loader_epoch(epoch, first_sample), torch.device(self.device))
        return self.current

    def _loader_epoch(self, epoch: int, first_sample: int):
        """A torch loader's batches of epoch `epoch` from sample `first_sample` on. Clips are decoded `prefetch`
        batches ahead on a thread (their decoders release the GIL): the next batches decode while the model trains."""
        skip = check_whole_batches(first_sample, self.batch_size, self.world_size, epoch)
        if self._generator is not None:  # the same order per (seed, epoch) as TensorBatches promises (or draws)
            self._generator.manual_seed(self.seed * 1000003 + epoch)
        elif self._sampler is not None:  # DistributedSampler, LengthBatches
            self._sampler.set_epoch(epoch)
        if self._served is not None:
            self._served.epoch = epoch  # each sample's transform draws
        batches = _Skipped(self._loader, skip)
        if isinstance(self._served, ClipSequences):
            return _Prefetched(batches, self._settings["prefetch"])
        return batches

    def close(self) -> None:
        """Lets go of the native sources now: a streamed source's reader threads are joined when the last reference
        to it goes (its destructor), and a run's objects form cycles that only a later garbage collection would free.
        The set serves no batches after this."""
        self._tensors = self._loader = self.current = None

    def batches(self, epoch: int = 0):
        """Epoch `epoch`'s batches in Python, (inputs, targets) pairs as the engine gets them (gpucore's sources:
        augmented, standardised, on the device; a torch loader's: as it yields them)."""
        if self._tensors is None:
            yield from self._loader_epoch(epoch, 0)
            return
        source = self.epoch(epoch)
        while (batch := source.next()) is not None:
            yield batch


def skipped_files(data, source) -> List[str]:
    """Files left out of `data`, "path: why", each once: found but of a format gpucore does not decode, unreadable
    at decode or while `source` streams (on_error skip)."""
    streamed = source.skipped() if isinstance(source, _C.FileBatches) else []
    return sorted(set(getattr(data, "unread", [])) | set(getattr(data, "skipped", [])) | set(streamed))


class _Skipped:
    """A loader's batches from `skip` on, with a len(), each checked to be (inputs, targets) tensors (_checked)."""

    def __init__(self, loader, skip):
        self.loader, self.skip = loader, skip

    def __len__(self):
        return max(len(self.loader) - self.skip, 0)

    def __iter__(self):
        return (_checked(batch, self.loader) for batch in itertools.islice(iter(self.loader), self.skip, None))


class _Prefetched:
    """An iterable's items fetched up to `depth` ahead on a thread of their own, in order; its errors raised where the
    item would have been. An iteration left early (an interrupt, a report taking one batch) stops the thread, which
    finishes the item it is fetching."""

    def __init__(self, items, depth: int):
        self.items, self.depth = items, depth

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        fetched, stop = queue.Queue(self.depth), threading.Event()
        end = object()

        def fetch():
            try:
                for item in self.items:
                    while not stop.is_set():
                        try:
                            fetched.put((item, None), timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
                fetched.put((end, None))
            except BaseException as error:  # noqa: B036 - raised again in the iterating thread
                fetched.put((end, error))

        thread = threading.Thread(target=fetch, name="gpucore-clip-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                item, error = fetched.get()
                if error is not None:
                    raise error
                if item is end:
                    return
                yield item
        finally:
            stop.set()
            while thread.is_alive():  # a full queue must not keep the thread from seeing the stop
                try:
                    fetched.get(timeout=0.1)
                except queue.Empty:
                    pass
            thread.join()


def _checked(batch, loader):
    """A torch loader's batch if it is what the engine takes, (inputs, targets) tensors; else a ConfigError showing it
    (the caller's DataLoader batches itself: gpucore reads dict samples only from a Dataset)."""
    if isinstance(batch, (tuple, list)) and len(batch) >= 2 and all(isinstance(t, torch.Tensor) for t in batch[:2]):
        return batch
    raise ConfigError(f"a batch of the {type(loader).__name__} is {describe(batch)}, not (inputs, targets) tensors; "
                      "pass its Dataset as train_data instead, and gpucore reads its samples (pairs or dicts; PIL "
                      "images and uint8 images transformed, scaled and normalised), or have the loader yield "
                      "(inputs, targets)")


def training_set(data, config, device: torch.device, normalize=True, rank: int = 0, world_size: int = 1,
                 identify: bool = False, sampling_weights: Optional[torch.Tensor] = None) -> EpochData:
    """A run's training set as config keys transforms, crop_padding, hflip, cache, batch_size, shuffle, drop_last,
    prefetch, seed and data_kwargs (a torch Dataset's dict keys) say, sharded over `world_size` processes.
    `normalize`: True for its own statistics (when config key normalize asks for them), or the (mean, std) to use (a
    checkpoint's); `identify`: record its identity; `sampling_weights`: config key sampler balanced's, per sample."""
    plan = plan_data(dataset_samples(data, config.data_kwargs), device=device, training=True,
                     transforms=config.transforms, crop_padding=config.crop_padding, hflip=config.hflip,
                     cache=config.cache, normalize=config.normalize if normalize is True else normalize,
                     identify=identify)
    return EpochData(plan, config.batch_size, seed=config.seed, shuffle=config.shuffle, drop_last=config.drop_last,
                     prefetch=config.prefetch, rank=rank, world_size=world_size, sampling_weights=sampling_weights)


def training_and_validation_sets(train_data, val_data, config, device: torch.device, *, rank: int, world_size: int,
                                 sampling_weights: Optional[torch.Tensor]) -> Tuple[EpochData, Optional[EpochData]]:
    """A training run's two data sets, each planned once, with its identity: the training set (training_set, on its
    own statistics, this process's shard) and the validation set (validation_set, standardised with the training
    set's statistics; None without `val_data`)."""
    train_set = training_set(train_data, config, device, rank=rank, world_size=world_size, identify=True,
                             sampling_weights=sampling_weights)
    return train_set, validation_set(val_data, config, device, train_set.plan.normalization, identify=True)


def validation_set(data, config, device: torch.device, normalization, identify: bool = False,
                   transforms=None) -> Optional[EpochData]:
    """A run's validation set (every process evaluates all of it) in the deterministic form of config key transforms
    (or of `transforms`, the list a loaded model planned already), standardised with the training set's
    `normalization`; None without data."""
    if data is None:
        return None
    plan = plan_data(dataset_samples(data, config.data_kwargs), device=device, training=False,
                     transforms=config.transforms if transforms is None else transforms, cache=config.cache,
                     normalize=normalization, identify=identify)
    return EpochData(plan, config.eval_batch_size, seed=config.seed, prefetch=config.prefetch)
