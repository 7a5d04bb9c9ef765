package wan

import "fmt"

// SameSite is the path between two hosts widened from the same site of a
// profile (two machines in one data centre).
var SameSite = Path{RTTMS: 2, RateMbit: 1000}

// Widen returns p with n ≥ len(p.Hosts) hosts: host j sits at site
// j mod len(p.Hosts) (named sfo, iad, …, sfo2, iad2, …) and reaches the
// others over the path between their sites, or SameSite within one site.
// wanbench's 16-node global run places 16 nodes on 6 sites this way.
func Widen(p Profile, n int) (Profile, error) {
	k := len(p.Hosts)
	if k == 0 || n < k {
		return Profile{}, fmt.Errorf("%w: cannot widen %d hosts to %d", ErrProfile, k, n)
	}
	paths := map[[2]string]Path{}
	for _, pa := range p.Paths {
		paths[[2]string{pa.A, pa.B}], paths[[2]string{pa.B, pa.A}] = pa, pa
	}
	w := Profile{Name: fmt.Sprintf("%s-%d", p.Name, n), About: fmt.Sprintf("%s widened to %d hosts", p.Name, n), Inner: p.Inner}
	for j := 0; j < n; j++ {
		h := p.Hosts[j%k]
		if j >= k {
			h.Name = fmt.Sprintf("%s%d", h.Name, j/k+1)
		}
		w.Hosts = append(w.Hosts, h)
	}
	for a := 0; a < n; a++ {
		for b := a + 1; b < n; b++ {
			sa, sb := p.Hosts[a%k].Name, p.Hosts[b%k].Name
			pa, ok := paths[[2]string{sa, sb}]
			switch {
			case sa == sb:
				pa = SameSite
			case !ok && p.Default != nil:
				pa = *p.Default
			case !ok:
				return Profile{}, fmt.Errorf("%w: no path %s–%s", ErrProfile, sa, sb)
			}
			pa.A, pa.B = w.Hosts[a].Name, w.Hosts[b].Name
			w.Paths = append(w.Paths, pa)
		}
	}
	return w, w.Validate()
}
