package sketch

import "math"

// estimate is the distinct count of the registers whose values have the histogram hist
// (hist[k] registers hold k, hist[len-1] the largest rank there is): Ertl's improved raw estimator ("New cardinality
// estimation algorithms for HyperLogLog sketches", 2017, algorithm 6). Unlike the
// original HyperLogLog it needs no switch to linear counting for small counts nor a
// correction near 2^64, and no bias tables as HyperLogLog++ does; its error is that of
// the registers (1.04/√m) over the whole range.
func estimate(hist []int) uint64 {
	m := 0.0
	for _, n := range hist {
		m += float64(n)
	}
	top := len(hist) - 1
	z := m * tau(1-float64(hist[top])/m)
	for k := top - 1; k >= 1; k-- {
		z = 0.5 * (z + float64(hist[k]))
	}
	z += m * sigma(float64(hist[0])/m)
	return uint64(math.Round(m * m / (2 * math.Ln2) / z))
}

// sigma is σ(x) = x + Σ_{k≥1} x^(2^k)·2^(k−1), summed until it no longer changes.
func sigma(x float64) float64 {
	if x == 1 {
		return math.Inf(1)
	}
	y, z := 1.0, x
	for {
		x *= x
		prev := z
		z += x * y
		y += y
		if z == prev {
			return z
		}
	}
}

// tau is τ(x) = (1 − x − Σ_{k≥1} (1 − x^(2^−k))²·2^−k) / 3, summed until it no longer changes.
func tau(x float64) float64 {
	if x == 0 || x == 1 {
		return 0
	}
	y, z := 1.0, 1-x
	for {
		x = math.Sqrt(x)
		prev := z
		y *= 0.5
		z -= (1 - x) * (1 - x) * y
		if z == prev {
			return z / 3
		}
	}
}
