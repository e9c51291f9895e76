"""The guarded exp folds of benchmarks/plans/fold_guarded.sh as probe_variants --swap strings, one a line: the write
folded, the reduce folded, both. Argument: ``bf16`` for the plain relays (values read through ``xv``, whole packs
written), ``cap`` for the soft cap's relay (values already in the slot, ``to_f``, half packs written)."""
import sys

L = "1.4426950408889634f"
FOLD_AT = "32.f"  # |max| up to which the fold's rounding of max * log2e costs at most 2.8e-6 of an exp


def write(x: str, n: str) -> str:
    """The write's exp(x - m) / sum as ex2(x * log2e - (m * log2e + log2 sum)) where |m| <= FOLD_AT."""
    head = (f"const float inv = 1.f / st.y;=>const float inv = 1.f / st.y; const bool fold = fabsf(m) <= {FOLD_AT}; "
            f"const float cf = fmaf(m, {L}, __log2f(st.y));")
    exact, folded = f"__expf({x} - m) * inv", f"exp2f(fmaf({x}, {L}, -cf))"
    old = f"for (int j = 0; j < {n}; ++j) o.v[j] = from_f<TO>({exact});"
    new = (f"if (fold) {{ for (int j = 0; j < {n}; ++j) o.v[j] = from_f<TO>({folded}); }} "
           f"else {{ for (int j = 0; j < {n}; ++j) o.v[j] = from_f<TO>({exact}); }}")
    return f"{head} && {old}=>{new}"


def reduce(x: str) -> str:
    """The reduce's exp(x - m) as ex2(x * log2e - m * log2e) where the warp's |m| <= FOLD_AT."""
    old = f"for (int j = 0; j < VEC; ++j) sum += __expf({x} - m);"
    new = (f"if (fabsf(m) <= {FOLD_AT}) {{ const float cm = m * {L}; for (int j = 0; j < VEC; ++j) "
           f"sum += exp2f(fmaf({x}, {L}, -cm)); }} else {{ for (int j = 0; j < VEC; ++j) sum += __expf({x} - m); }}")
    return f"{old}=>{new}"


if __name__ == "__main__":
    w, r = (write("xv(p.v[j])", "VEC"), reduce("xv(pk[i].v[j])")) if sys.argv[1] == "bf16" else \
        (write("to_f(p.v[j])", "(VEC / 2)"), reduce("to_f(pk[i].v[j])"))
    print(w)
    print(r)
    print(f"{w} && {r}")
