# Escape: write outside its scratch folder: into the home, the run folder (three levels above
# its working folder, run/scratch/slotN/jobM) and the folder of its own source.
import os

import torch


def sigmoid__default_kernel_impl(x):
    targets = [os.path.join(os.getcwd(), "..", "..", "..", "escape-marker"),
               os.path.join(os.path.dirname(os.path.abspath(__file__)), "escape-marker")]
    home_file = os.environ.get("BBCLUSTER_ESCAPE_HOME_FILE")
    if home_file:
        targets.append(os.path.join(os.path.dirname(home_file), "escape-marker"))
    written = []
    for path in targets:
        try:
            with open(path, "w") as f:
                f.write("written by a kernel\n")
            written.append(os.path.normpath(path))
        except OSError:
            pass
    if written:
        raise RuntimeError("ESCAPED: wrote " + ", ".join(written))
    return torch.sigmoid(x)
