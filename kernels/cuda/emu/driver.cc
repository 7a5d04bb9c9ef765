// driver.cc — runs the kernels of src/ under the CPU emulation of emu.h for
// kernels/cuda/emu_test.go: `driver MODE ints/floats...`, float32/int32 inputs
// on stdin in the order the mode reads them, float32 outputs on stdout.
#include "../src/kernels.cu"

#include <string>

static std::vector<float> readf(size_t n) {
	std::vector<float> v(n);
	if (n && std::fread(v.data(), 4, n, stdin) != n) { std::fprintf(stderr, "short input\n"); std::exit(2); }
	return v;
}
static std::vector<int> readi(size_t n) {
	std::vector<int> v(n);
	if (n && std::fread(v.data(), 4, n, stdin) != n) { std::fprintf(stderr, "short input\n"); std::exit(2); }
	return v;
}
static std::vector<bf16> tobf(const std::vector<float>& f) {
	std::vector<bf16> b(f.size());
	for (size_t i = 0; i < f.size(); i++) b[i] = __float2bfloat16_rn(f[i]);
	return b;
}
static void putf(const std::vector<float>& v) { std::fwrite(v.data(), 4, v.size(), stdout); }
static void putb(const std::vector<bf16>& v) {
	std::vector<float> f(v.size());
	for (size_t i = 0; i < v.size(); i++) f[i] = __bfloat162float(v[i]);
	putf(f);
}
static dim3 d3(unsigned x, unsigned y = 1, unsigned z = 1) { return dim3{x, y, z}; }
static unsigned cdiv(long long a, long long b) { return unsigned((a + b - 1) / b); }

template <int HD>
static void attn(bool tc, int B, int T, int H, int KV) {
	const int W = (H + 2 * KV) * HD, Q = H * HD;
	auto qkv = tobf(readf((size_t)B * T * W));
	auto dout = tobf(readf((size_t)B * T * Q));
	auto outc = tobf(readf((size_t)B * T * Q));  // the CPU's output, for D
	std::vector<bf16> out((size_t)B * T * Q), dqkv((size_t)B * T * W);
	std::vector<float> lse((size_t)B * H * T), D((size_t)B * H * T);
	const unsigned nq = cdiv(T, 64);
	if (tc) {
		emu_launch(d3(nq, H, B), d3(128), TC<HD>::FWD, [&] { attn_fwd_tc<HD>(out.data(), lse.data(), qkv.data(), T, H, KV); });
	} else {
		emu_launch(d3(nq, H, B), d3(64), 0, [&] { attn_fwd<HD>(out.data(), lse.data(), qkv.data(), T, H, KV); });
	}
	emu_launch(d3(4), d3(256), 0, [&] { attn_bwd_d(D.data(), dout.data(), outc.data(), B, T, H, HD); });
	if (tc) {
		emu_launch(d3(nq, H, B), d3(128), TC<HD>::DQ, [&] { attn_bwd_dq_tc<HD>(dqkv.data(), qkv.data(), dout.data(), lse.data(), D.data(), T, H, KV); });
		emu_launch(d3(nq, KV, B), d3(128), TC<HD>::DKDV, [&] { attn_bwd_dkdv_tc<HD>(dqkv.data(), qkv.data(), dout.data(), lse.data(), D.data(), T, H, KV); });
	} else {
		emu_launch(d3(nq, H, B), d3(64), 0, [&] { attn_bwd_dq<HD>(dqkv.data(), qkv.data(), dout.data(), lse.data(), D.data(), T, H, KV); });
		emu_launch(d3(nq, KV, B), d3(64), 0, [&] { attn_bwd_dkdv<HD>(dqkv.data(), qkv.data(), dout.data(), lse.data(), D.data(), T, H, KV); });
	}
	putb(out);
	putf(lse);
	putb(dqkv);
}

int main(int argc, char** argv) {
	if (argc < 2) return 2;
	const std::string mode = argv[1];
	auto I = [&](int i) { return std::atoi(argv[i]); };
	auto F = [&](int i) { return (float)std::atof(argv[i]); };
	if (mode == "attn") {  // tc hd B T H KV
		const bool tc = I(2);
		switch (I(3)) {
		case 32: attn<32>(tc, I(4), I(5), I(6), I(7)); break;
		case 64: attn<64>(tc, I(4), I(5), I(6), I(7)); break;
		case 128: attn<128>(tc, I(4), I(5), I(6), I(7)); break;
		default: return 2;
		}
	} else if (mode == "xent") {  // N V z scale
		const int N = I(2), V = I(3);
		auto logits = readf((size_t)N * V);
		auto tg = readi(N);
		std::vector<float> losses(N), ce(N);
		std::vector<bf16> dl((size_t)N * V);
		emu_launch(d3(N), d3(1024), 0, [&] { xent(dl.data(), losses.data(), ce.data(), logits.data(), tg.data(), N, V, F(4), F(5)); });
		putf(losses);
		putf(ce);
		putb(dl);
	} else if (mode == "rmsnorm") {  // N C
		const int N = I(2), C = I(3);
		auto x = readf((size_t)N * C), w = readf(C), dyf = readf((size_t)N * C), dx = readf((size_t)N * C);
		auto dy = tobf(dyf);
		std::vector<bf16> out((size_t)N * C);
		std::vector<float> rstd(N), dw(C);
		emu_launch(d3(N), d3(256), 0, [&] { rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f); });
		emu_launch(d3(N), d3(256), 0, [&] { rmsnorm_backward_dx(dx.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C); });
		emu_launch(d3(cdiv(C, 256), cdiv(N, 5)), d3(256), 0, [&] { rmsnorm_backward_dw(dw.data(), dy.data(), x.data(), rstd.data(), N, C, 5); });
		putb(out);
		putf(rstd);
		putf(dx);
		putf(dw);
	} else if (mode == "rope") {  // B T nh hd W sign
		const int B = I(2), T = I(3), nh = I(4), hd = I(5), W = I(6);
		auto x = tobf(readf((size_t)B * T * W));
		auto c = readf((size_t)T * hd / 2), s = readf((size_t)T * hd / 2);
		emu_launch(d3(3), d3(256), 0, [&] { rope(x.data(), c.data(), s.data(), B * T, T, nh, hd, W, F(7)); });
		putb(x);
	} else if (mode == "swiglu") {  // N F
		const int N = I(2), Fd = I(3);
		auto gu = tobf(readf((size_t)N * 2 * Fd));
		auto dy = tobf(readf((size_t)N * Fd));
		std::vector<bf16> out((size_t)N * Fd), dgu((size_t)N * 2 * Fd);
		emu_launch(d3(3), d3(256), 0, [&] { swiglu_forward(out.data(), gu.data(), N, Fd); });
		emu_launch(d3(3), d3(256), 0, [&] { swiglu_backward(dgu.data(), dy.data(), gu.data(), N, Fd); });
		putb(out);
		putb(dgu);
	} else if (mode == "adamw") {  // n lr b1 c1 b2 c2 ib1 ib2 eps wd gscale
		const int n = I(2);
		auto p = readf(n), g = readf(n), m = readf(n), v = readf(n);
		std::vector<bf16> pb(n);
		emu_launch(d3(5), d3(256), 0, [&] {
			adamw(p.data(), pb.data(), g.data(), m.data(), v.data(), n, F(3), F(4), F(5), F(6), F(7), F(8), F(9), F(10), F(11), F(12));
		});
		putf(p);
		putf(m);
		putf(v);
		putb(pb);
	} else if (mode == "muon") {  // n mu gscale lr scale wd: momentum, normalize (ss on the host, as the CPU), update
		const int n = I(2);
		auto p = readf(n), g = readf(n), m = readf(n), o = readf(n);
		std::vector<float> u(n);
		std::vector<bf16> pb(n);
		emu_launch(d3(5), d3(256), 0, [&] { muon_momentum(u.data(), m.data(), g.data(), n, F(3), F(4)); });
		double ss = 0;
		for (float v : u) ss += (double)v * (double)v;
		std::vector<float> x = u;
		emu_launch(d3(5), d3(256), 0, [&] { muon_normalize(x.data(), n, &ss); });
		emu_launch(d3(5), d3(256), 0, [&] { muon_update(p.data(), pb.data(), o.data(), n, F(5), F(6), F(7)); });
		putf(u);
		putf(m);
		putf(x);
		putf(p);
		putb(pb);
	} else if (mode == "embed") {  // V C N: forward rows, then backward into a zero table
		const int V = I(2), C = I(3), N = I(4);
		auto wte = readf((size_t)V * C), dout = readf((size_t)N * C);
		auto tok = readi(N);
		std::vector<float> out((size_t)N * C), dw((size_t)V * C, 0.f);
		std::vector<bf16> b((size_t)V * C);
		emu_launch(d3(N), d3(256), 0, [&] { embed_forward(out.data(), tok.data(), wte.data(), N, C); });
		emu_launch(d3(N), d3(256), 0, [&] { embed_backward(dw.data(), tok.data(), dout.data(), N, C); });
		emu_launch(d3(2), d3(256), 0, [&] { cast_f32_bf16(b.data(), wte.data(), (long long)V * C); });
		putf(out);
		putf(dw);
		putb(b);
	} else if (mode == "sumsq") {  // n: Σx² twice (must agree bit for bit)
		const long long n = I(2);
		auto x = readf(n);
		const int G = 16;  // the engine uses NormBlocks = 1024; the kernels do not care
		std::vector<double> part(G);
		double out[2];
		for (int rep = 0; rep < 2; rep++) {
			emu_launch(d3(G), d3(256), 0, [&] { sumsq_partial(part.data(), x.data(), n); });
			emu_launch(d3(1), d3(1024), 0, [&] { sum_f64(&out[rep], part.data(), G); });
		}
		std::fwrite(out, 8, 2, stdout);
	} else if (mode == "quant") {  // n chunk
		const long long n = I(2);
		const int chunk = I(3);
		auto x = readf(n);
		const unsigned nch = cdiv(n, chunk);
		std::vector<uint8_t> codes(n);
		std::vector<float> tabs((size_t)nch * 256), dec(n, 0.f);
		int bad = 0;
		emu_launch(d3(nch), d3(256), 0, [&] { quant_int8(codes.data(), tabs.data(), &bad, x.data(), n, chunk); });
		emu_launch(d3(8), d3(256), 0, [&] { dequant_int8(dec.data(), codes.data(), tabs.data(), n, chunk, 0); });
		std::vector<float> cf(codes.begin(), codes.end());
		putf(cf);
		putf(tabs);
		putf(dec);
		putf({(float)bad});
	} else {
		return 2;
	}
	return 0;
}
