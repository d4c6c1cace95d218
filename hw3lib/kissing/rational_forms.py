"""When can a configuration with rational inner products be given integer coordinates? Rational quadratic forms.

A point set whose Gram matrix is rational spans a rational quadratic space (Q^n, G). It has rational
coordinates in R^n (then integer ones, after scaling) iff G is *similar* to the standard form: G is
rationally equivalent to lambda * I_n for some rational lambda > 0 (a rational M with M^T M = lambda G).
By the Hasse-Minkowski theorem two positive definite rational forms of the same dimension are
equivalent iff they have the same discriminant (modulo squares) and the same Hasse invariant at every
prime. This module decides it:

- `diagonalize(gram)`: an equivalent diagonal form <d_1, ..., d_n>, exactly (Fractions);
- `hilbert_symbol(a, b, p)`: (a, b)_p for nonzero rationals and a prime p;
- `hasse_invariant(diagonal, p)`: prod_{i<j} (d_i, d_j)_p;
- `similarity_factor(gram)`: a lambda that works, or None with the reason (the discriminant or the prime
  whose Hasse invariant differs).

Why it matters here: configurations built over the Eisenstein integers Z[omega] (Ganzhinov's layered
constructions) live in a space whose Gram matrix, in the basis (1, omega) of each complex coordinate, has
blocks A2 / 2 = [[1, -1/2], [-1/2, 1]] ~ <1, 3/4> ~ <1, 3>. With the height axis of the layered frame that
space is <1^6, 3^5>, which is similar to no multiple of I_11 (the Hasse invariant at 3 differs; see the
tests), so such a configuration has no integer coordinates at all. The layered search
(hw3lib.kissing.layered) therefore searches rational groups and orbits, which need no similarity.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations


def diagonalize(gram) -> list[Fraction]:
    """An equivalent diagonal form of a symmetric nondegenerate rational matrix (symmetric elimination)."""
    a = [[Fraction(x) for x in row] for row in gram]
    n = len(a)
    if any(len(row) != n for row in a) or any(a[i][j] != a[j][i] for i in range(n) for j in range(n)):
        raise ValueError("diagonalize needs a square symmetric matrix")
    diagonal = []
    for k in range(n):
        if a[k][k] == 0:
            # bring a nonzero diagonal entry to position k: swap with a later one, or add a row/column
            swap = next((j for j in range(k + 1, n) if a[j][j] != 0), None)
            if swap is not None:
                a[k], a[swap] = a[swap], a[k]
                for row in a:
                    row[k], row[swap] = row[swap], row[k]
            else:
                partner = next((j for j in range(k + 1, n) if a[k][j] != 0), None)
                if partner is None:
                    raise ValueError("the form is degenerate (the Gram matrix is singular)")
                for j in range(n):
                    a[k][j] += a[partner][j]
                for i in range(n):
                    a[i][k] += a[i][partner]
        pivot = a[k][k]
        diagonal.append(pivot)
        for i in range(k + 1, n):
            factor = a[i][k] / pivot
            if factor:
                for j in range(k, n):
                    a[i][j] -= factor * a[k][j]
                for j in range(k, n):
                    a[j][i] = a[i][j]
    return diagonal


def _valuation(x: int, p: int) -> int:
    count = 0
    while x % p == 0:
        x //= p
        count += 1
    return count


def _split(x: Fraction, p: int) -> tuple[int, Fraction]:
    """x = p^v * u with u a p-adic unit (numerator and denominator prime to p)."""
    v = _valuation(abs(x.numerator), p) - _valuation(x.denominator, p)
    return v, x / Fraction(p) ** v


def _legendre(u: Fraction, p: int) -> int:
    value = u.numerator * pow(u.denominator, -1, p) % p
    return 1 if pow(value, (p - 1) // 2, p) == 1 else -1


def hilbert_symbol(a, b, p: int) -> int:
    """(a, b)_p for nonzero rationals a, b and a prime p (Serre, A Course in Arithmetic, III.1.2)."""
    a, b = Fraction(a), Fraction(b)
    if a == 0 or b == 0:
        raise ValueError("the Hilbert symbol needs nonzero arguments")
    alpha, u = _split(a, p)
    beta, v = _split(b, p)
    if p != 2:
        epsilon = (p - 1) // 2
        sign = (-1) ** (alpha * beta * epsilon)
        return sign * _legendre(u, p) ** beta * _legendre(v, p) ** alpha
    # p = 2: work with u, v modulo 8 (odd integers after clearing the odd denominators)
    u_mod = u.numerator * u.denominator % 8
    v_mod = v.numerator * v.denominator % 8
    eps = lambda x: ((x - 1) // 2) % 2  # noqa: E731  (u - 1)/2 mod 2
    omega = lambda x: ((x * x - 1) // 8) % 2  # noqa: E731  (u^2 - 1)/8 mod 2
    exponent = eps(u_mod) * eps(v_mod) + alpha * omega(v_mod) + beta * omega(u_mod)
    return (-1) ** (exponent % 2)


def hasse_invariant(diagonal, p: int) -> int:
    result = 1
    for a, b in combinations(diagonal, 2):
        result *= hilbert_symbol(a, b, p)
    return result


def _primes_of(x: Fraction) -> set[int]:
    primes = set()
    for value in (abs(x.numerator), x.denominator):
        d = 2
        while d * d <= value:
            while value % d == 0:
                primes.add(d)
                value //= d
            d += 1
        if value > 1:
            primes.add(value)
    return primes


def _squarefree(x: Fraction) -> int:
    """The squarefree integer in x's class modulo rational squares."""
    value = x.numerator * x.denominator
    result, d = 1, 2
    sign = -1 if value < 0 else 1
    value = abs(value)
    while d * d <= value:
        while value % (d * d) == 0:
            value //= d * d
        if value % d == 0:
            result *= d
            value //= d
        d += 1
    return sign * result * value


def similarity_factor(gram, extra_primes: tuple[int, ...] = (3, 5, 7, 11, 13)) -> tuple[int | None, str]:
    """(lambda, why): a squarefree lambda with gram ~ lambda * I over Q, or (None, the reason there is none).

    For odd dimension lambda is forced (the discriminant's class); for even dimension the discriminant must
    be a square and lambda is looked for among products of the relevant primes and `extra_primes`.
    """
    diagonal = diagonalize(gram)
    n = len(diagonal)
    if any(d <= 0 for d in diagonal):
        return None, "the form is not positive definite"
    discriminant = Fraction(1)
    for d in diagonal:
        discriminant *= d
    primes = {2}
    for d in diagonal:
        primes |= _primes_of(d)
    if n % 2:
        candidates = [_squarefree(discriminant)]
    elif n % 4 == 0:
        # the Hasse invariants of lambda * I_n are (lambda, -1)_p^(n(n-1)/2), and n(n-1)/2 is even: all lambdas agree
        candidates = [1]
    else:
        if _squarefree(discriminant) != 1:
            return None, (f"the discriminant is {_squarefree(discriminant)} times a square, not a square, so no "
                          f"multiple of I_{n} (discriminant lambda^{n}, a square) is equivalent")
        pool = sorted(primes | set(extra_primes))
        candidates = sorted({_product(c) for r in range(len(pool) + 1) for c in combinations(pool, r)})
    for lam in candidates:
        relevant = primes | _primes_of(Fraction(lam))
        target = [Fraction(lam)] * n
        differing = [p for p in sorted(relevant) if hasse_invariant(diagonal, p) != hasse_invariant(target, p)]
        if not differing:
            return lam, f"equivalent to {lam} * I_{n}: same discriminant and Hasse invariants at {sorted(relevant)}"
        if n % 4 != 2:
            if n % 4 == 0:
                return None, (f"the Hasse invariants at p = {', '.join(map(str, differing))} differ from those of "
                              f"I_{n}, and every multiple lambda * I_{n} has the same ones")
            return None, (f"lambda must be {lam} (the discriminant's class), and the Hasse invariants at p = "
                          f"{', '.join(map(str, differing))} differ from those of {lam} * I_{n}")
    return None, f"no lambda among products of {sorted(primes | set(extra_primes))} matches every Hasse invariant"


def _product(values) -> int:
    result = 1
    for v in values:
        result *= v
    return result
