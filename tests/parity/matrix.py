"""The matrix: every configuration the differential suite runs.

Defaults: 64 training samples and 32 validation samples in batches of 16 (4 and 2
batches), SGD with momentum, the port written as docs/porting.md says.
"""

from __future__ import annotations

import os

from parity.case import Case, DataSpec, ModuleSpec, Resume

EXACT_RESUME = (
    "interlock resumes exactly (RNG, data position and loop state are in the checkpoint); "
    "Lightning restarts the epoch's data and RNG, so its resumed run differs from its uninterrupted one"
)

FETCH_WHEN_NEEDED = (
    "from a loader without a length (an IterableDataset) interlock fetches a training batch when its step is next; "
    "Lightning prefetches one batch ahead to know the last batch early, so the iterator's side effects land one step "
    "earlier there (sized loaders: no prefetch in either); interlock's saved data position is then the batches "
    "trained, so a resume restarts the stream exactly where training stopped"
)
LAST_AT_EVERY_SAVE = (
    "last.ckpt is the newest resumable point: ModelCheckpoint(save_last=True) writes it at every save point "
    "(each epoch end, each every_n_train_steps), so ckpt_path='last' and a preempted run resume from the latest state; "
    "Lightning writes it only alongside a top-k save, so it can lag behind the run (and a callback's "
    "on_save_checkpoint runs at fewer points there)"
)
EARLY_ERROR = (
    "a bad training-data setting (a batch fraction rounding to 0, val_check_interval longer than the epoch) "
    "raises at set-up, before the sanity check; Lightning raises the same after running the sanity check"
)
NO_VAL = DataSpec(val_loaders=0)
SHUFFLED = DataSpec(shuffle=True)
LOG = ModuleSpec(style="log")
HOOKS = ModuleSpec(hooks=True)
E2 = {"max_epochs": 2}
E3 = {"max_epochs": 3}
E4 = {"max_epochs": 4}

WARMUP = ModuleSpec(overrides=("warmup",))

CASES: list[Case] = [
    # -- the module's Lightning overrides (optimizer_step, optimizer_zero_grad, ...) ------------
    Case("override-warmup", E2, module=WARMUP),
    Case(
        "override-warmup-accumulate-2-clip",
        {**E2, "accumulate_grad_batches": 2, "gradient_clip_val": 0.5},
        module=WARMUP,
    ),
    Case("override-warmup-hooks", E2, module=ModuleSpec(overrides=("warmup",), hooks=True)),
    Case(
        "override-zero-grad-accumulate-3",
        {**E2, "accumulate_grad_batches": 3},
        module=ModuleSpec(overrides=("zero_grad",)),
    ),
    Case("override-clip", E2, module=ModuleSpec(overrides=("clip",), optimizer="adam", lr=0.01)),
    Case(
        "override-sched-step",
        E2,
        module=ModuleSpec(overrides=("sched",), scheduler="exp", interval="step", style="log"),
    ),
    Case("override-sched-epoch", E3, module=ModuleSpec(overrides=("sched",), scheduler="step")),
    # -- epochs and steps ------------------------------------------------------------------
    Case("epochs-1", {"max_epochs": 1}),
    Case("epochs-3", E3),
    Case("epochs-2-no-val", E2, data=NO_VAL),
    Case("epochs-2-shuffle", E2, data=SHUFFLED),
    Case("epochs-2-shuffle-dropout", E2, module=ModuleSpec(dropout=0.5), data=SHUFFLED),
    Case(
        "epochs-2-shuffle-dropout-no-sanity",
        {**E2, "num_sanity_val_steps": 0},
        module=ModuleSpec(dropout=0.5),
        data=SHUFFLED,
    ),
    Case("epochs-2-uneven-batches", E2, data=DataSpec(n_train=60, n_val=30)),
    Case("fetch-order", E2, data=DataSpec(log_fetches=True)),
    Case(
        "fetch-order-iterable",
        E2,
        data=DataSpec(log_fetches=True, iterable=True),
        expected_difference=FETCH_WHEN_NEEDED,
        differs=("fetches",),
    ),
    Case("max-steps-5", {"max_steps": 5}),
    Case("max-steps-3-in-epoch-1", {"max_epochs": 1, "max_steps": 3}),
    Case("max-steps-6-epochs-1", {"max_epochs": 1, "max_steps": 6}),
    Case("max-steps-0", {"max_steps": 0}),
    Case("max-epochs-0", {"max_epochs": 0}),
    # -- limits ----------------------------------------------------------------------------
    Case("limit-train-2", {**E2, "limit_train_batches": 2}),
    Case("limit-train-0.5", {**E2, "limit_train_batches": 0.5}),
    Case("limit-train-0", {**E2, "limit_train_batches": 0}),
    Case("limit-train-0.1", {**E2, "limit_train_batches": 0.1}, expected_difference=EARLY_ERROR, differs=("calls",)),
    Case("limit-val-0.1", {**E2, "limit_val_batches": 0.1}),
    Case("limit-val-1", {**E2, "limit_val_batches": 1}),
    Case("limit-val-0.5", {**E2, "limit_val_batches": 0.5}),
    Case("limit-val-0", {**E2, "limit_val_batches": 0}),
    Case("limit-test-1", {**E2, "limit_test_batches": 1}, calls=("fit", "test"), requires=("eval_returns_list",)),
    Case("limit-predict-1", {**E2, "limit_predict_batches": 1}, calls=("fit", "predict")),
    # -- accumulation and clipping ---------------------------------------------------------
    Case("accumulate-2", {**E2, "accumulate_grad_batches": 2}),
    Case("accumulate-3", {**E2, "accumulate_grad_batches": 3}),
    Case("accumulate-2-max-steps-3", {"max_steps": 3, "accumulate_grad_batches": 2}),
    Case("clip-norm-0.5", {**E2, "gradient_clip_val": 0.5}),
    Case("clip-value-0.05", {**E2, "gradient_clip_val": 0.05, "gradient_clip_algorithm": "value"}),
    Case("clip-norm-accumulate-2", {**E2, "gradient_clip_val": 0.1, "accumulate_grad_batches": 2}),
    Case(
        "clip-value-adam",
        {**E2, "gradient_clip_val": 0.01, "gradient_clip_algorithm": "value"},
        module=ModuleSpec(optimizer="adam", lr=0.01),
    ),
    # -- optimizers ------------------------------------------------------------------------
    Case("adam", E2, module=ModuleSpec(optimizer="adam", lr=0.01)),
    Case("adam-wd", E2, module=ModuleSpec(optimizer="adam", lr=0.01, weight_decay=0.1)),
    Case("adamw-wd", E2, module=ModuleSpec(optimizer="adamw", lr=0.01, weight_decay=0.1)),
    Case("sgd-wd", E2, module=ModuleSpec(weight_decay=0.01)),
    Case("two-optimizers", E2, module=ModuleSpec(optimizer="two")),  # both refuse: manual optimization is needed
    # -- schedulers ------------------------------------------------------------------------
    Case("sched-step-epoch", E3, module=ModuleSpec(scheduler="step")),
    Case("sched-step-epoch-freq-2", E4, module=ModuleSpec(scheduler="step", frequency=2)),
    Case("sched-exp-step", E2, module=ModuleSpec(scheduler="exp", interval="step")),
    Case("sched-exp-step-freq-2", E2, module=ModuleSpec(scheduler="exp", interval="step", frequency=2)),
    Case(
        "sched-exp-step-freq-3",
        E3,
        module=ModuleSpec(scheduler="exp", interval="step", frequency=3),
    ),
    Case("sched-step-adamw", E3, module=ModuleSpec(optimizer="adamw", lr=0.01, weight_decay=0.1, scheduler="step")),
    Case("sched-plateau-val-loss", E4, module=ModuleSpec(lr=0.5, scheduler="plateau", monitor="val_loss")),
    Case("sched-plateau-train-loss", E4, module=ModuleSpec(lr=0.5, scheduler="plateau", monitor="train_loss")),
    Case(
        "sched-plateau-no-monitor",
        E2,
        module=ModuleSpec(scheduler="plateau"),
    ),
    Case(
        "sched-exp-step-accumulate-2",
        {**E2, "accumulate_grad_batches": 2},
        module=ModuleSpec(scheduler="exp", interval="step"),
    ),
    # -- validation schedule ---------------------------------------------------------------
    Case("val-check-int-2", {**E2, "val_check_interval": 2}),
    Case("val-check-float-0.5", {**E2, "val_check_interval": 0.5}),
    Case("val-check-float-0.25", {**E2, "val_check_interval": 0.25}),
    Case("val-check-float-0.3", {**E2, "val_check_interval": 0.3}),
    Case(
        "val-check-int-longer-than-epoch",
        {**E2, "val_check_interval": 10},
        expected_difference=EARLY_ERROR,
        differs=("calls",),
    ),
    Case("val-check-int-3-across-epochs", {**E3, "val_check_interval": 3, "check_val_every_n_epoch": None}),
    Case("check-val-every-2", {**E3, "check_val_every_n_epoch": 2}),
    Case("check-val-every-3", {**E3, "check_val_every_n_epoch": 3}),
    Case("val-check-0.5-max-steps-3", {"max_steps": 3, "val_check_interval": 0.5}),
    Case("sanity-0", {**E2, "num_sanity_val_steps": 0}),
    Case("sanity-1", {**E2, "num_sanity_val_steps": 1}),
    Case("sanity-all", {**E2, "num_sanity_val_steps": -1}),
    Case("sanity-5-limit-val-1", {**E2, "num_sanity_val_steps": 5, "limit_val_batches": 1}),
    Case(
        "sanity-all-shuffle-dropout",
        {**E2, "num_sanity_val_steps": -1},
        module=ModuleSpec(dropout=0.5),
        data=SHUFFLED,
    ),
    # -- ModelCheckpoint -------------------------------------------------------------------
    Case("ckpt-default", E3, checkpoint={}),
    Case("ckpt-val-loss-top1", E3, checkpoint={"monitor": "val_loss"}),
    Case("ckpt-val-acc-max-top2", E4, checkpoint={"monitor": "val_acc", "mode": "max", "save_top_k": 2}),
    Case(
        "ckpt-val-loss-top2-lr-high", E4, checkpoint={"monitor": "val_loss", "save_top_k": 2}, module=ModuleSpec(lr=2.0)
    ),
    Case("ckpt-top-all", E3, checkpoint={"monitor": "val_loss", "save_top_k": -1}),
    Case(
        "ckpt-top0-last",
        E3,
        checkpoint={"save_top_k": 0, "save_last": True},
        expected_difference=LAST_AT_EVERY_SAVE,
        differs=("callback_hooks",),
    ),
    Case("ckpt-save-last", E3, checkpoint={"monitor": "val_loss", "save_last": True}),
    Case("ckpt-every-2-epochs", E4, checkpoint={"every_n_epochs": 2, "save_top_k": -1}),
    Case("ckpt-every-3-steps", E3, checkpoint={"every_n_train_steps": 3, "save_top_k": -1}),
    Case(
        "ckpt-every-3-steps-monitor",
        E3,
        checkpoint={"every_n_train_steps": 3, "monitor": "train_loss", "save_top_k": 2},
    ),
    Case("ckpt-filename-metric", E3, checkpoint={"monitor": "val_loss", "filename": "{epoch}-{val_loss:.2f}"}),
    Case("ckpt-filename-step", E3, checkpoint={"save_top_k": -1, "filename": "model-{step}"}),
    Case("ckpt-filename-epoch-02d", E3, checkpoint={"save_top_k": -1, "filename": "{epoch:02d}"}),
    Case("ckpt-train-loss", E3, checkpoint={"monitor": "train_loss", "save_top_k": 2}),
    Case("ckpt-train-loss-no-val", E3, checkpoint={"monitor": "train_loss"}, data=NO_VAL),
    Case(
        "ckpt-val-loss-check-val-every-2",
        {**E4, "check_val_every_n_epoch": 2},
        checkpoint={"monitor": "val_loss", "save_top_k": -1},
    ),
    Case(
        "ckpt-train-loss-check-val-every-2",
        {**E4, "check_val_every_n_epoch": 2},
        checkpoint={"monitor": "train_loss", "save_top_k": -1},
    ),
    Case(
        "ckpt-every-2-epochs-save-last",
        E3,
        checkpoint={"every_n_epochs": 2, "save_top_k": -1, "save_last": True},
        expected_difference=LAST_AT_EVERY_SAVE,
        differs=("callback_hooks", "last_step"),
    ),
    Case(
        "ckpt-val-loss-save-last-no-improvement",
        {"max_epochs": 6},
        checkpoint={"monitor": "val_loss", "save_last": True},
        module=ModuleSpec(lr=5.0),
        expected_difference=LAST_AT_EVERY_SAVE,
        differs=("callback_hooks", "last_step"),
    ),
    Case("ckpt-max-steps-mid-epoch", {"max_steps": 6}, checkpoint={"save_last": True, "save_top_k": -1}),
    # -- EarlyStopping ---------------------------------------------------------------------
    Case(
        "es-val-loss-patience-0",
        {"max_epochs": 6},
        early_stopping={"monitor": "val_loss", "patience": 0, "min_delta": 0.15},
    ),
    Case(
        "es-val-loss-patience-1",
        {"max_epochs": 6},
        early_stopping={"monitor": "val_loss", "patience": 1, "min_delta": 0.1},
    ),
    Case(
        "es-val-loss-patience-2-lr-high",
        {"max_epochs": 8},
        early_stopping={"monitor": "val_loss", "patience": 2},
        module=ModuleSpec(lr=2.0),
    ),
    Case("es-val-acc-max", {"max_epochs": 6}, early_stopping={"monitor": "val_acc", "mode": "max", "patience": 1}),
    Case("es-stopping-threshold", {"max_epochs": 6}, early_stopping={"monitor": "val_loss", "stopping_threshold": 0.5}),
    Case(
        "es-divergence-threshold",
        {"max_epochs": 6},
        early_stopping={"monitor": "val_loss", "divergence_threshold": 0.3},
    ),
    Case(
        "es-with-ckpt",
        {"max_epochs": 6},
        early_stopping={"monitor": "val_loss", "patience": 0, "min_delta": 0.15},
        checkpoint={"monitor": "val_loss"},
    ),
    Case(
        "es-train-loss",
        {"max_epochs": 6},
        early_stopping={"monitor": "train_loss", "patience": 0, "min_delta": 0.15},
    ),
    Case(
        "es-train-loss-no-val",
        {"max_epochs": 6},
        early_stopping={"monitor": "train_loss", "patience": 0, "min_delta": 0.15},
        data=NO_VAL,
    ),
    # -- validate / test / predict ---------------------------------------------------------
    Case("validate-only", calls=("validate",), requires=("eval_returns_list",)),
    Case("test-only", calls=("test",), requires=("eval_returns_list",)),
    Case("predict-only", calls=("predict",)),
    Case("fit-then-test", E2, calls=("fit", "test"), requires=("eval_returns_list",)),
    Case("fit-then-validate-test", E2, calls=("fit", "validate", "test"), requires=("eval_returns_list",)),
    Case("fit-then-predict", E2, calls=("fit", "predict")),
    Case("validate-limit-val-1", {"limit_val_batches": 1}, calls=("validate",), requires=("eval_returns_list",)),
    # -- debugging and precision -----------------------------------------------------------
    Case("fast-dev-run", {"fast_dev_run": True}),
    Case("fast-dev-run-3", {"fast_dev_run": 3}),
    Case("fast-dev-run-test", {"fast_dev_run": True}, calls=("fit", "test"), requires=("eval_returns_list",)),
    Case("precision-64", {**E2, "precision": "64-true"}),
    Case("precision-bf16-mixed", {**E2, "precision": "bf16-mixed"}),
    Case("precision-bf16-mixed-adam", {**E2, "precision": "bf16-mixed"}, module=ModuleSpec(optimizer="adam", lr=0.01)),
    # -- resuming --------------------------------------------------------------------------
    Case(
        "resume-epoch-end",
        E3,
        resume=Resume(stop_step=4),
        expected_difference=EXACT_RESUME,
        differs=("callback_hooks", "calls", "epoch_metrics"),
    ),
    Case(
        "resume-mid-epoch",
        E3,
        resume=Resume(stop_step=3),
        expected_difference=EXACT_RESUME,
        differs=("epoch_metrics", "last_metrics", "metrics", "resumed_exactly", "weights"),
    ),
    Case(
        "resume-mid-epoch-shuffle-dropout",
        E3,
        module=ModuleSpec(dropout=0.5),
        data=SHUFFLED,
        resume=Resume(stop_step=6),
        expected_difference=EXACT_RESUME,
        differs=("epoch_metrics", "last_metrics", "metrics", "resumed_exactly", "weights"),
    ),
    # -- self.log (pending) ----------------------------------------------------------------
    Case("log-epochs-2", E2, module=LOG, requires=("self_log",)),
    Case("log-no-val", E2, module=LOG, data=NO_VAL, requires=("self_log",)),
    Case("log-on-epoch", E2, module=ModuleSpec(style="log_epoch"), requires=("self_log",)),
    Case(
        "log-on-epoch-uneven",
        E2,
        module=ModuleSpec(style="log_epoch"),
        data=DataSpec(n_train=60),
        requires=("self_log",),
    ),
    Case("log-dict", E2, module=ModuleSpec(style="log_dict"), requires=("self_log",)),
    Case(
        "log-on-epoch-es",
        {"max_epochs": 6},
        module=ModuleSpec(style="log_epoch"),
        early_stopping={"monitor": "train_loss_epoch", "patience": 0, "min_delta": 0.15},
        requires=("self_log",),
    ),
    Case(
        "log-on-epoch-ckpt",
        E3,
        module=ModuleSpec(style="log_epoch"),
        checkpoint={"monitor": "train_loss_epoch"},
        requires=("self_log",),
    ),
    Case("log-test", E2, module=LOG, calls=("fit", "test"), requires=("self_log", "eval_returns_list")),
    # -- module hooks (pending) ------------------------------------------------------------
    Case("hooks-fit", E2, module=HOOKS, requires=("module_hooks",)),
    Case("hooks-fit-no-val", E2, module=HOOKS, data=NO_VAL, requires=("module_hooks",)),
    Case("hooks-fit-accumulate-2", {**E2, "accumulate_grad_batches": 2}, module=HOOKS, requires=("module_hooks",)),
    Case(
        "hooks-fit-test",
        {"max_epochs": 1},
        module=HOOKS,
        calls=("fit", "test"),
        requires=("module_hooks", "eval_returns_list"),
    ),
    Case("hooks-val-check-0.5", {**E2, "val_check_interval": 0.5}, module=HOOKS, requires=("module_hooks",)),
    Case("hooks-limit-val-0", {**E2, "limit_val_batches": 0}, module=HOOKS, requires=("module_hooks",)),
    Case("val-check-float-0.5-across-epochs", {**E2, "val_check_interval": 0.5, "check_val_every_n_epoch": None}),
    # -- manual optimization (pending) -----------------------------------------------------
    Case(
        "manual-one-optimizer",
        E2,
        module=ModuleSpec(style="log", manual=True),
        requires=("self_log", "manual_optimization"),
    ),
    Case(
        "manual-two-optimizers",
        E2,
        module=ModuleSpec(style="log", manual=True, optimizer="two"),
        requires=("self_log", "manual_optimization"),
    ),
    Case(
        "manual-max-steps-4",
        {"max_steps": 4},
        module=ModuleSpec(style="log", manual=True, optimizer="two"),
        requires=("self_log", "manual_optimization"),
    ),
    # -- data modules and several loaders (pending) ----------------------------------------
    Case("datamodule-fit", E2, data=DataSpec(datamodule=True), requires=("datamodule",)),
    Case(
        "datamodule-fit-test-predict",
        E2,
        data=DataSpec(datamodule=True),
        calls=("fit", "test", "predict"),
        requires=("datamodule", "eval_returns_list"),
    ),
    Case(
        "datamodule-validate",
        data=DataSpec(datamodule=True),
        calls=("validate",),
        requires=("datamodule", "eval_returns_list"),
    ),
    Case("val-loaders-2", E2, data=DataSpec(val_loaders=2), requires=("several_eval_loaders",)),
    Case(
        "val-loaders-2-limit-1",
        {**E2, "limit_val_batches": 1},
        data=DataSpec(val_loaders=2),
        requires=("several_eval_loaders",),
    ),
    Case(
        "val-loaders-2-validate-test",
        data=DataSpec(val_loaders=2),
        calls=("validate", "test"),
        requires=("several_eval_loaders", "eval_returns_list"),
    ),
    # -- new Trainer flags and callback arguments (pending) --------------------------------
    Case(
        "min-epochs-es",
        {"max_epochs": 6, "min_epochs": 4},
        early_stopping={"monitor": "val_loss", "patience": 0, "min_delta": 0.15},
        requires=("trainer_flags",),
    ),
    Case(
        "min-steps-es",
        {"max_epochs": 6, "min_steps": 10},
        early_stopping={"monitor": "val_loss", "patience": 0, "min_delta": 0.15},
        requires=("trainer_flags",),
    ),
    Case("overfit-batches-2", {**E2, "overfit_batches": 2}, requires=("trainer_flags",)),
    Case("overfit-batches-0.5-shuffle", {**E2, "overfit_batches": 0.5}, data=SHUFFLED, requires=("trainer_flags",)),
    Case("log-every-n-steps-1", {**E2, "log_every_n_steps": 1}, requires=("trainer_flags",)),
    Case(
        "ckpt-save-weights-only",
        E2,
        checkpoint={"save_weights_only": True, "save_top_k": -1},
        requires=("checkpoint_args",),
    ),
    Case(
        "ckpt-no-auto-metric-name",
        E3,
        checkpoint={"monitor": "val_loss", "filename": "{epoch}-{val_loss:.2f}", "auto_insert_metric_name": False},
        requires=("checkpoint_args",),
    ),
    Case(
        "ckpt-save-on-train-epoch-end",
        E3,
        checkpoint={"monitor": "val_loss", "save_on_train_epoch_end": True},
        requires=("checkpoint_args",),
    ),
    Case(
        "ckpt-monitor-step",
        E3,
        checkpoint={"monitor": "step", "mode": "max", "save_top_k": 2},
        requires=("checkpoint_args",),
    ),
    Case(
        "es-check-on-train-epoch-end",
        {"max_epochs": 6},
        early_stopping={"monitor": "val_loss", "patience": 0, "min_delta": 0.15, "check_on_train_epoch_end": True},
        requires=("early_stopping_args",),
    ),
    Case(
        "es-verbose-not-strict",
        {"max_epochs": 3},
        early_stopping={"monitor": "missing", "strict": False, "verbose": True},
        requires=("early_stopping_args",),
    ),
]

if os.environ.get("INTERLOCK_PARITY_ACCELERATOR", "cpu") != "cpu":  # fp16 loss scaling and half weights: GPU only
    CASES += [
        Case("precision-16-mixed", {**E2, "precision": "16-mixed"}),
        Case(
            "precision-16-mixed-adam-clip",
            {**E2, "precision": "16-mixed", "gradient_clip_val": 0.5},
            module=ModuleSpec(optimizer="adam", lr=0.01),
        ),
        Case("precision-16-mixed-accumulate", {**E2, "precision": "16-mixed", "accumulate_grad_batches": 2}),
        Case("precision-bf16-true", {**E2, "precision": "bf16-true"}),
        Case("precision-16-true", {**E2, "precision": "16-true"}),
    ]
