"""Freeze-thaw with GPAR on a table of toy learning curves, one worker.

Every run pauses at every checkpoint; the policy decides, one checkpoint at a time,
whether to resume a paused run or to start a new setting.
"""

import torch
from gpar_bo.freeze_thaw import FreezeThawPolicy
from gpar_bo.synthetic import learning_curves

torch.set_num_threads(1)
EPOCHS = [1, 3, 7, 14, 21]                                        # the checkpoints
settings = torch.rand(300, 2, dtype=torch.double, generator=torch.Generator().manual_seed(0))
curves = learning_curves(settings, EPOCHS, noise_std=0.005)      # 300 x 5 errors, a table
policy = FreezeThawPolicy(EPOCHS, seed=0)

started, reached, spent = [], [], 0  # table rows of the runs; checkpoints each reported
while spent < 100:                   # a budget of 100 epochs
    Y = torch.full((len(started), len(EPOCHS)), float("nan"), dtype=torch.double)
    for row, (s, k) in enumerate(zip(started, reached)):
        Y[row, :k] = curves[s, :k]                                 # each run's prefix
    paused = torch.tensor([k < len(EPOCHS) for k in reached], dtype=torch.bool)
    remaining = [i for i in range(len(settings)) if i not in started]
    decision = policy.decide(settings[started], Y, paused, candidates=settings[remaining],
                             epochs_left=100 - spent)              # one worker: all that is left
    if decision.action == "start":
        started.append(remaining[decision.index])
        reached.append(0)
    run = decision.index if decision.action == "resume" else len(started) - 1
    spent += EPOCHS[reached[run]] - (EPOCHS[reached[run] - 1] if reached[run] else 0)
    reached[run] += 1                                              # train to its next checkpoint

finished = [float(curves[s, -1]) for s, k in zip(started, reached) if k == len(EPOCHS)]
print(f"{len(started)} runs, {len(finished)} finished, best final error {min(finished):.4f}, "
      f"table's best {float(curves[:, -1].min()):.4f}")
