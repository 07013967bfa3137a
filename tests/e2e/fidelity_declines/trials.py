# A search over learning rates: each trial makes its model and optimizer afresh.
# An error after the optimizer step: with oom.exact=true the inner loop declines
# (its optimizer would step twice) and the trial loop is the point: the trial's
# model and optimizer are made again, so nothing of it differs.
import torch


def run_trial(model, opt):
    for step in range(3):
        loss = model(torch.ones(2, 2)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("  step", step, round(loss.item(), 6))   # line 14: the fake OOM


def search():
    for lr in (0.1, 0.01):
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        print("trial", lr)
        run_trial(model, opt)
        print("weight", [round(v, 6) for v in model.weight.flatten().tolist()])


search()
