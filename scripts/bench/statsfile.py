"""Read the "name value" snapshot files that ram-per-item.sh and small-tier.sh write
(`OUT/<label>.stats`: RSS lines and `stats` output); numeric values only."""


def read_stats(out, label):
    d = {}
    for line in open(f"{out}/{label}.stats"):
        k, _, v = line.strip().partition(" ")
        try:
            d[k] = float(v)
        except ValueError:
            pass
    return d
