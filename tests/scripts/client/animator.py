"""The seed's training loop with d2l's Animator, changed by one import: three epochs of a
softmax regression, the curves on the dpt-tui dashboard. Prints what the Animator kept, so a test
can compare it with the record. Run by tests/script_runs.rs."""
import json

import torch
from torch import nn

from dpt_tui import Animator  # the one changed line: `from d2l import torch as d2l` before

torch.manual_seed(0)
net = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))
trainer = torch.optim.SGD(net.parameters(), lr=0.1)
loss = nn.CrossEntropyLoss()
X, y = torch.randn(256, 1, 28, 28), torch.randint(0, 10, (256,))
X_test, y_test = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
num_epochs, num_batches = 3, 8
animator = Animator(xlabel="epoch", xlim=[1, num_epochs], ylim=[0.3, 0.9], legend=["train loss", "train acc", "test acc"])
for epoch in range(num_epochs):
    for i in range(num_batches):
        xb, yb = X[i * 32:(i + 1) * 32], y[i * 32:(i + 1) * 32]
        y_hat = net(xb)
        l = loss(y_hat, yb)
        trainer.zero_grad()
        l.backward()
        trainer.step()
        acc = (y_hat.argmax(1) == yb).float().mean().item()
        animator.add(epoch + (i + 1) / num_batches, (l.item(), acc, None))
    with torch.no_grad():
        test_acc = (net(X_test).argmax(1) == y_test).float().mean().item()
    animator.add(epoch + 1, (None, None, test_acc))
print(json.dumps({"test_acc": animator.Y[2], "train_loss_last": animator.Y[0][-1], "points": len(animator.X[0])}))
