# The LBFGS pattern of a public time-series example: optimizer.step(closure),
# then a test forward under no_grad, where the error comes.  The step is named:
# the iteration runs again from its start and steps again.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5)
x, y = torch.randn(16, 3), torch.randn(16, 1)


def main():
    for i in range(3):
        def closure():
            optimizer.zero_grad()
            loss = (model(x) - y).pow(2).mean()
            loss.backward()
            return loss
        optimizer.step(closure)
        with torch.no_grad():
            test = (model(x) - y).pow(2).mean()      # line 21: the fake OOM
            print("test loss", i, round(test.item(), 6))


main()
