"""examples/conv_layers.py run twice in one process, printing only the second pass: every
convolution has been seen once (as in a training step after the first), so WD's knapsack covers
the whole network while each layer is timed, not only the layers before it.

    marmoset run --sim=p100 --workspace-total 960MiB -- .venv/bin/python examples/conv_layers_again.py data/conv-layers/alexnet.csv
"""
import contextlib
import io

import conv_layers

if __name__ == "__main__":
    with contextlib.redirect_stdout(io.StringIO()):
        conv_layers.main()
    conv_layers.main()
