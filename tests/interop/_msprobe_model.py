"""Run msprobe's PrecisionDebugger on a tiny torch model on CPU (a child process: msprobe patches torch).

Usage: python _msprobe_model.py TASK DUMP_PATH [PERTURB [HIDDEN [STEPS]]]. Writes DUMP_PATH/step{N}/proc{PID}/...
PERTURB is added to one weight of the last layer (the "target" side of a comparison); HIDDEN sizes the
model (the peer benchmark uses a large one).
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


def main() -> None:
    task, out = sys.argv[1], sys.argv[2]
    perturb = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    hidden = int(sys.argv[4]) if len(sys.argv) > 4 else 16
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    config = {"task": task, "dump_path": out, "rank": [], "step": [], "level": "L1",
              "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
              "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
    with open(out + ".config.json", "w") as handle:
        json.dump(config, handle)
    torch.manual_seed(0)
    model = Tiny(hidden)
    if perturb:
        with torch.no_grad():
            model.down.weight[0, 0] += perturb
    debugger = PrecisionDebugger(config_path=out + ".config.json")
    for _ in range(steps):
        debugger.start(model)
        x = torch.randn(3, 8)
        model(x).sum().backward()
        debugger.stop()
        debugger.step()


if __name__ == "__main__":
    main()
