"""A Numba kernel inside a PyTorch model: ez.torch.function under backward() and
torch.func (vmap of grad, hessian) (needs torch).

python examples/torch_bridge.py
"""

import math

import numba
import numpy as np
import torch

import enzyme_py as ez


@numba.njit
def smooth_l1(pred, target, beta):
    total = 0.0
    for i in range(pred.shape[0]):
        d = abs(pred[i] - target[i])
        total += 0.5 * d * d / beta if d < beta else d - 0.5 * beta
    return total / pred.shape[0] + 0.0 * math.tanh(beta)


loss = ez.torch.function(smooth_l1)
torch.manual_seed(0)
model = torch.nn.Linear(4, 1, dtype=torch.float64)
x = torch.randn(64, 4, dtype=torch.float64)
y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64) + 0.25
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
for _ in range(300):
    optimizer.zero_grad()
    value = loss(model(x).reshape(-1), y, 1.0)
    value.backward()
    optimizer.step()
print(f"final loss {float(value.detach()):.2e}, weights {model.weight.detach().numpy().round(3)}")
reference = torch.nn.functional.smooth_l1_loss(model(x).reshape(-1), y, beta=1.0)
if (
    not np.isclose(float(value.detach()), float(reference.detach()), rtol=1e-2, atol=1e-6)
    or float(value.detach()) > 1e-3
):
    raise SystemExit("torch_bridge: training did not converge")


# torch.func: a per-sample gradient (vmap of grad) and the Hessian, checked against
# PyTorch's own autodiff of the same loss written in torch.
def smooth_l1_torch(pred, target, beta):
    return torch.nn.functional.smooth_l1_loss(pred, target, beta=beta)


preds = model(x).reshape(-1).detach().reshape(8, 8)
targets = y.reshape(8, 8)
per_sample = torch.vmap(torch.func.grad(loss), in_dims=(0, 0, None))(preds, targets, 1.0)
want = torch.vmap(torch.func.grad(smooth_l1_torch), in_dims=(0, 0, None))(preds, targets, 1.0)
hess = torch.func.hessian(loss)(preds[0], targets[0], 1.0)
want_hess = torch.func.hessian(smooth_l1_torch)(preds[0], targets[0], 1.0)
print(f"per-sample gradients {tuple(per_sample.shape)}, Hessian {tuple(hess.shape)}")
if not (torch.allclose(per_sample, want, atol=1e-12) and torch.allclose(hess, want_hess)):
    raise SystemExit("torch_bridge: torch.func derivatives disagree with PyTorch's")
print("torch_bridge: OK")
