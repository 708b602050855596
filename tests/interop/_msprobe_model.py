"""Run msprobe's PrecisionDebugger on a tiny torch model on CPU (a child process: msprobe patches torch).

Usage: python _msprobe_model.py TASK DUMP_PATH (TASK: tensor, statistics, or md5: statistics with
``summary_mode: "md5"``) [PERTURB [HIDDEN [STEPS [LEVEL]]]]. Writes
DUMP_PATH/step{N}/proc{PID}/... PERTURB is added to one weight of the last layer (the "target" side of a
comparison); HIDDEN sizes the model (the peer benchmark uses a large one). LEVEL is msprobe's level; given,
the run uses the ``Embedded`` model (an embedding and two linear layers, PERTURB added
to ``linear1.weight[3, 5]``), whose modules L0 and mix dump with their parameters and parameter grads.
"""

from __future__ import annotations

import json
import sys

import torch

from msprobe.pytorch import PrecisionDebugger


class Tiny(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, hidden)
        self.down = torch.nn.Linear(hidden, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.relu(self.up(x))
        return torch.nn.functional.gelu(self.down(h), approximate="tanh")  # a keyword argument


class Embedded(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.label_emb = torch.nn.Embedding(10, 8)
        self.linear1 = torch.nn.Linear(8, 6)
        self.linear2 = torch.nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(torch.relu(self.linear1(self.label_emb(x))))


def main() -> None:
    task, out = sys.argv[1], sys.argv[2]
    perturb = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    hidden = int(sys.argv[4]) if len(sys.argv) > 4 else 16
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    level = sys.argv[6] if len(sys.argv) > 6 else "L1"
    summary = "md5" if task == "md5" else "statistics"  # TASK "md5": the statistics task, summary_mode "md5"
    task = "statistics" if task == "md5" else task
    config = {
        "task": task,
        "dump_path": out,
        "rank": [],
        "step": [],
        "level": level,
        "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary},
        "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
    }
    with open(out + ".config.json", "w") as handle:
        json.dump(config, handle)
    torch.manual_seed(0)
    model = Tiny(hidden) if len(sys.argv) <= 6 else Embedded()
    if perturb:
        with torch.no_grad():
            weight = model.down.weight[0, 0:1] if isinstance(model, Tiny) else model.linear1.weight[3, 5:6]
            weight += perturb
    debugger = PrecisionDebugger(config_path=out + ".config.json")
    for _ in range(steps):
        debugger.start(model)
        x = torch.randn(3, 8) if isinstance(model, Tiny) else torch.tensor([[1, 2, 3], [4, 5, 1]])
        model(x).sum().backward()
        debugger.stop()
        debugger.step()


if __name__ == "__main__":
    main()
