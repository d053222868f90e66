"""SHA-256 of each built-in dataset built on the reference machine
(written by ``datasets/build.py``; see the cards in ``datasets/``)."""

# name: (steps, SHA-256)
REFERENCE_SHA256 = {
    'cartpole-expert': (100000, '95e739cd79d0e10e3f594ccb3cf3e9dc3ce3469737eadf240e9c26602ea958c6'),
    'cartpole-medium': (100000, '06d3b0173f22c3ed1fce11dc3a0ca5654c384bcb7d9faa15e1f66669a4ef0ac9'),
    'cartpole-random': (100000, '49b23ffa4b8409215608d0b3e4d14f94898775c6516ddb9275999eb174715e32'),
    'cartpole-replay': (50000, '354166c0aa244a704c92adcaa6f8c640346e09712b821772a54bf7ffeb0e9a1e'),
    'pendulum-expert': (100000, 'a2b1fa59192bef5bd8ec1e3685f5e431452d69d2cf54a7f755f44e589d1cd9bd'),
    'pendulum-medium': (100000, '0b29a6e6142cdea9a4cd9b86f7ca7985f873b85a0649e6b8a135798f4afe4b5a'),
    'pendulum-random': (100000, '599cff1e687832843de3fae35aa8650ea96b57332cdfdf05e59080b685125311'),
    'pendulum-replay': (20000, '9882f8d9bd541477ef7bde01ce4dbd5ee5cf24b7d7efe25f9687e96a635d9133'),
}
