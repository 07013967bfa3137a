"""The names of the functions and methods that draw random numbers, in one place.

instrument.py marks each iteration of a loop whose body calls one of them (itself
or through a function of its module that does, by name), so that the generators
are rolled back to the iteration's start (iteration.py).  A call with a
``generator=`` keyword counts as a draw as well (GENERATOR_KEYWORD).  Names, not
bindings: a same-named call that draws nothing costs only a mark per iteration; a
draw made through a name not listed here (a library's own function) is not
rolled back, and the suspension names the generator it moved (rng_check.py).

tests/unit/python/test_rng_names.py checks the table against the libraries: every
public method of random.Random, numpy's Generator and RandomState and every
function of numpy.random that draws, and torch's samplers, so that a name the
libraries add is not silently missed.

Imports nothing: instrument.py reads it while a user module is compiled.
"""

# random.Random's methods that draw (seed, getstate and setstate do not).
RANDOM = frozenset({
    "betavariate", "binomialvariate", "choice", "choices", "expovariate", "gammavariate",
    "gauss", "getrandbits", "lognormvariate", "normalvariate", "paretovariate",
    "randbytes", "randint", "random", "randrange", "sample", "shuffle", "triangular",
    "uniform", "vonmisesvariate", "weibullvariate"})

# numpy.random.Generator's and RandomState's methods and numpy.random's functions
# that draw.  Left out: `bytes` and `f`, names of builtins and of everyday
# functions, which would mark loops that draw nothing (their draws are named at the
# rescue instead).
NUMPY = frozenset({
    "beta", "binomial", "chisquare", "choice", "dirichlet", "exponential", "gamma",
    "geometric", "gumbel", "hypergeometric", "integers", "laplace", "logistic", "lognormal",
    "logseries", "multinomial", "multivariate_hypergeometric", "multivariate_normal",
    "negative_binomial", "noncentral_chisquare", "noncentral_f", "normal", "pareto",
    "permutation", "permuted", "poisson", "power", "random", "rayleigh", "shuffle",
    "standard_cauchy", "standard_exponential", "standard_gamma", "standard_normal",
    "standard_t", "triangular", "uniform", "vonmises", "wald", "weibull", "zipf",
    # RandomState and the module's legacy functions
    "rand", "randint", "randn", "random_integers", "random_sample", "ranf", "sample",
    "tomaxint"})
NUMPY_LEFT_OUT = frozenset({"bytes", "f"})

# torch's functions, Tensor methods (the in-place samplers), torch.nn.functional's
# and torch.nn.init's functions that draw from a torch generator.
TORCH = frozenset({
    "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
    "normal", "bernoulli", "multinomial", "poisson", "binomial",
    "normal_", "uniform_", "bernoulli_", "random_", "exponential_", "geometric_",
    "cauchy_", "log_normal_",
    "dropout", "dropout_", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
    "alpha_dropout_", "feature_alpha_dropout", "feature_alpha_dropout_", "feature_dropout",
    "feature_dropout_", "rrelu", "rrelu_", "gumbel_softmax", "fractional_max_pool2d",
    "fractional_max_pool3d", "rsample", "sample",
    "kaiming_normal_", "kaiming_uniform_", "xavier_normal_", "xavier_uniform_",
    "trunc_normal_", "orthogonal_", "sparse_"})

# A call that passes a generator draws from it: torch's `generator=g`.
GENERATOR_KEYWORD = "generator"

DRAWING = RANDOM | NUMPY | TORCH
