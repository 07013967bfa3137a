"""A small torch CPU training loop: tiny MLP, fixed seed, one thread, Adam."""
import torch

from _common import measure, scale

torch.set_num_threads(1)
STEPS = max(20, int(300 * scale()))


def make_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 32, generator=g)
    w = torch.randn(32, 1, generator=g)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(4096, 1, generator=g)
    return x, y


X, Y = make_data()


def work():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.MSELoss()
    loss = None
    for step in range(STEPS):
        i = (step * 64) % 4096
        xb, yb = X[i:i + 64], Y[i:i + 64]
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
    return round(float(loss), 6)


if __name__ == "__main__":
    measure("torch", work, info={"torch": torch.__version__,
                                  "threads": torch.get_num_threads()})
