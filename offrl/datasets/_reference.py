"""SHA-256 of each built-in dataset built on the reference machine
(written by ``datasets/build.py``; see the cards in ``datasets/``)."""

# name: (steps, SHA-256)
REFERENCE_SHA256 = {
    'cartpole-expert': (100000, '2d190444831cf126d25f10e772af0bd97bb6571ea31a20fbbc61fc5126c3f0fa'),
    'cartpole-medium': (100000, '75d85cbe5fe4cf47a0bc27bb7a5a791c137844ac072c6de773f582dd9afcfe34'),
    'cartpole-random': (100000, 'fb78bfca3b358d776a4581b829bdd2c54c2825013c8528e34c9c5d0bcada8fdd'),
    'cartpole-replay': (50000, '354166c0aa244a704c92adcaa6f8c640346e09712b821772a54bf7ffeb0e9a1e'),
    'pendulum-expert': (100000, '825e30e0d73ebb85357998e01a1fb825a8c96a945aa9006dee2a11faa65ba337'),
    'pendulum-medium': (100000, '468a7ff89d34106421dc338bc4509177a1f0f5649e1bc754ec5d62f06b9d2752'),
    'pendulum-random': (100000, '726fb8ab4f891748cbdcf7ed3bebe1ad60ef2a3b7aed600eb0c774effac909c9'),
    'pendulum-replay': (20000, '9882f8d9bd541477ef7bde01ce4dbd5ee5cf24b7d7efe25f9687e96a635d9133'),
}
