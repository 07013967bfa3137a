"""The shape of timm's train.py (pytorch-image-models), told again in small: a
main() that reads its many options before the epoch loop, inside
`try: ... except KeyboardInterrupt`, and train_one_epoch(), whose loop defines
its forward and backward as closures and runs the forward under a bf16
`amp_autocast()` (functools.partial of torch.autocast), with gradient
accumulation over 2 batches, a model EMA updated after each step, and a
DataLoader with one persistent worker."""
import hashlib
import time
from contextlib import suppress
from functools import partial
from types import SimpleNamespace

import torch
from torch.utils.data import DataLoader, TensorDataset


class Meter:
    def __init__(self):
        self.val = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n


class ModelEma:
    """An exponential moving average of the weights, updated after a step."""

    def __init__(self, model, decay=0.9):
        import copy
        self.module = copy.deepcopy(model).eval()
        self.decay = decay

    @torch.no_grad()
    def update(self, model, step=None):
        for ema, now in zip(self.module.state_dict().values(), model.state_dict().values()):
            if ema.is_floating_point():
                ema.lerp_(now.detach(), 1.0 - self.decay)


def train_one_epoch(epoch, model, loader, optimizer, loss_fn, args, device=torch.device("cpu"),
                    amp_autocast=suppress, model_dtype=None, model_ema=None):
    has_no_sync = hasattr(model, "no_sync")
    losses_m = Meter()
    model.train()
    accum_steps = args.grad_accum_steps
    last_accum_steps = len(loader) % accum_steps
    updates_per_epoch = (len(loader) + accum_steps - 1) // accum_steps
    num_updates = epoch * updates_per_epoch
    last_batch_idx = len(loader) - 1
    last_batch_idx_to_accum = len(loader) - last_accum_steps
    optimizer.zero_grad()
    for batch_idx, (input, target) in enumerate(loader):
        last_batch = batch_idx == last_batch_idx
        need_update = last_batch or (batch_idx + 1) % accum_steps == 0
        if batch_idx >= last_batch_idx_to_accum:
            accum_steps = last_accum_steps
        input, target = input.to(device=device, dtype=model_dtype), target.to(device=device)

        def _forward():
            with amp_autocast():
                output = model(input)
                _loss = loss_fn(output, target)
            if accum_steps > 1:
                _loss /= accum_steps
            return _loss

        def _backward(_loss):
            _loss.backward()
            if need_update:
                optimizer.step()

        if has_no_sync and not need_update:
            with model.no_sync():
                loss = _forward()
                _backward(loss)
        else:
            loss = _forward()
            _backward(loss)
        losses_m.update(loss.item() * accum_steps, input.shape[0])
        if not need_update:
            continue
        num_updates += 1
        optimizer.zero_grad()
        if model_ema is not None:
            model_ema.update(model, step=num_updates)
    return losses_m.sum / max(losses_m.count, 1)


# The options main() reads, as a training script's argument parser gives them.
OPTIONS = dict(
    data_dir="", dataset="", train_split="train", val_split="validation", num_samples=48,
    model="mlp", pretrained=False, initial_checkpoint="", resume="", no_resume_opt=False,
    num_classes=3, gp=None, img_size=None, in_chans=8, input_size=None, crop_pct=None, mean=None,
    std=None, interpolation="", batch_size=4, validation_batch_size=None, channels_last=False,
    fuser="", grad_accum_steps=2, grad_checkpointing=False, fast_norm=False, model_kwargs={},
    head_init_scale=None, head_init_bias=None, torchcompile=None, torchscript=False,
    opt="sgd", opt_eps=None, opt_betas=None, momentum=0.9, weight_decay=0.0, clip_grad=None,
    clip_mode="norm", layer_decay=None, opt_kwargs={}, sched="cosine", sched_on_updates=False,
    lr=0.1, lr_base=0.1, lr_base_size=256, lr_base_scale="", lr_noise=None, lr_noise_pct=0.67,
    lr_noise_std=1.0, lr_cycle_mul=1.0, lr_cycle_decay=0.5, lr_cycle_limit=1, lr_k_decay=1.0,
    warmup_lr=1e-5, min_lr=0.0, epochs=2, epoch_repeats=0.0, start_epoch=None,
    decay_milestones=[90], decay_epochs=90, warmup_epochs=0, warmup_prefix=False,
    cooldown_epochs=0, patience_epochs=10, decay_rate=0.1, no_aug=True, scale=[0.08, 1.0],
    ratio=[0.75, 1.33], hflip=0.5, vflip=0.0, color_jitter=0.4, aa=None, aug_repeats=0,
    aug_splits=0, jsd_loss=False, bce_loss=False, bce_sum=False, bce_target_thresh=None,
    bce_pos_weight=None, reprob=0.0, remode="pixel", recount=1, resplit=False, mixup=0.0,
    cutmix=0.0, cutmix_minmax=None, mixup_prob=1.0, mixup_switch_prob=0.5, mixup_mode="batch",
    mixup_off_epoch=0, smoothing=0.0, train_interpolation="random", drop=0.0,
    drop_connect=None, drop_path=None, drop_block=None, bn_momentum=None, bn_eps=None,
    sync_bn=False, dist_bn="reduce", split_bn=False, model_ema=True, model_ema_force_cpu=False,
    model_ema_decay=0.9, seed=0, worker_seeding="all", log_interval=50, recovery_interval=0,
    checkpoint_hist=10, workers=1, save_images=False, amp=True, amp_dtype="bfloat16",
    amp_impl="native", no_ddp_bb=False, synchronize_step=False, pin_mem=False,
    no_prefetcher=True, output="", experiment="", eval_metric="top1", tta=0, use_multi_epochs_loader=False,
    log_wandb=False, device="cpu",
)


def main():
    args = SimpleNamespace(**OPTIONS)
    torch.manual_seed(args.seed)
    # timm's main() reads some 150 of its options before the epoch loop:
    setup = [args.data_dir, args.dataset, args.train_split, args.val_split, args.model,
             args.pretrained, args.initial_checkpoint, args.resume, args.no_resume_opt,
             args.num_classes, args.gp, args.img_size, args.input_size, args.crop_pct,
             args.mean, args.std, args.interpolation, args.validation_batch_size,
             args.fuser, args.grad_checkpointing, args.fast_norm, args.model_kwargs,
             args.head_init_scale, args.head_init_bias, args.torchcompile, args.torchscript,
             args.opt, args.opt_eps, args.opt_betas, args.weight_decay, args.clip_grad,
             args.clip_mode, args.layer_decay, args.opt_kwargs, args.sched, args.sched_on_updates,
             args.lr_base, args.lr_base_size, args.lr_base_scale, args.lr_noise,
             args.lr_noise_pct, args.lr_noise_std, args.lr_cycle_mul, args.lr_cycle_decay,
             args.lr_cycle_limit, args.lr_k_decay, args.warmup_lr, args.min_lr,
             args.epoch_repeats, args.start_epoch, args.decay_milestones, args.decay_epochs,
             args.warmup_epochs, args.warmup_prefix, args.cooldown_epochs, args.patience_epochs,
             args.decay_rate, args.no_aug, args.scale, args.ratio, args.hflip, args.vflip,
             args.color_jitter, args.aa, args.aug_repeats, args.aug_splits, args.jsd_loss,
             args.bce_loss, args.bce_sum, args.bce_target_thresh, args.bce_pos_weight,
             args.reprob, args.remode, args.recount, args.resplit, args.mixup, args.cutmix,
             args.cutmix_minmax, args.mixup_prob, args.mixup_switch_prob, args.mixup_mode,
             args.smoothing, args.train_interpolation, args.drop, args.drop_connect,
             args.drop_path, args.drop_block, args.bn_momentum, args.bn_eps, args.sync_bn,
             args.dist_bn, args.split_bn, args.model_ema_force_cpu, args.worker_seeding,
             args.log_interval, args.recovery_interval, args.checkpoint_hist, args.save_images,
             args.amp_impl, args.no_ddp_bb, args.synchronize_step, args.pin_mem, args.output,
             args.experiment, args.eval_metric, args.tta, args.use_multi_epochs_loader,
             args.log_wandb, time.monotonic, hashlib.sha256, str(args.mixup_off_epoch)]
    device = torch.device(args.device)
    amp_dtype = torch.bfloat16 if args.amp_dtype == "bfloat16" else torch.float16
    amp_autocast = partial(torch.autocast, device_type=device.type, dtype=amp_dtype) if args.amp else suppress
    model = torch.nn.Sequential(torch.nn.Linear(args.in_chans, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, args.num_classes))
    model_ema = ModelEma(model, decay=args.model_ema_decay) if args.model_ema else None
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    dataset = TensorDataset(torch.randn(args.num_samples, args.in_chans),
                            torch.randint(0, args.num_classes, (args.num_samples,)))
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        persistent_workers=True)
    results = []
    try:
        for epoch in range(args.epochs):
            loss = train_one_epoch(epoch, model, loader, optimizer, loss_fn, args, device=device,
                                   amp_autocast=amp_autocast, model_ema=model_ema)
            results.append(loss)
            print(epoch, f"{loss:.6f}", len(setup))
    except KeyboardInterrupt:
        pass
    digest = hashlib.sha256()
    for t in list(model.state_dict().values()) + list(model_ema.module.state_dict().values()):
        digest.update(t.detach().float().numpy().tobytes())
    print("digest", digest.hexdigest())


if __name__ == "__main__":
    main()
