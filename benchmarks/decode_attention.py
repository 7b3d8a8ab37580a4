"""Decode attention over gathered K/V blocks: two float32 matmuls and a softmax (the old path) vs one fused
SDPA call with the query heads of each kv head folded in (the new), float32 and bfloat16 pools, 1 thread.

    .venv/bin/python benchmarks/decode_attention.py > benchmarks/results/decode_attention.txt
"""
import torch, time
import torch.nn.functional as F
torch.set_num_threads(1)
KH, G, D, bs = 3, 3, 64, 16
H = KH * G
NB = 4000
def bench(f, t=1.5):
    for _ in range(2): f()
    s = time.perf_counter(); r = 0
    while time.perf_counter() - s < t: f(); r += 1
    return (time.perf_counter() - s) / r * 1e3
for B, L in ((128, 320), (32, 640), (256, 160)):
    blocks = L // bs
    tables = torch.randint(0, NB, (B * blocks,))
    lens = torch.randint(L // 2, L + 1, (B,))
    pad = torch.arange(L).view(1, -1) >= lens.view(-1, 1)
    bias32 = torch.zeros(B, L).masked_fill_(pad, float('-inf'))
    for dt in (torch.float32, torch.bfloat16):
        kp = torch.randn(KH, NB, bs, D).to(dt); vp = torch.randn(KH, NB, bs, D).to(dt)
        q = torch.randn(B, H, D, dtype=torch.bfloat16)
        def cur():
            keys = torch.index_select(kp, 1, tables).view(KH, B, -1, D)
            values = torch.index_select(vp, 1, tables).view(KH, B, -1, D)
            grouped = q.float().view(B, KH, G, D).transpose(0, 1)
            if dt != torch.float32:
                keys, values = keys.float(), values.float()
            sc = torch.matmul(grouped, keys.transpose(-1, -2)).mul_(D ** -0.5).add_(bias32.view(1, B, 1, -1))
            return torch.matmul(torch.softmax(sc, -1), values)
        def sdpa():
            keys = torch.index_select(kp, 1, tables).view(KH, B, -1, D).transpose(0, 1)  # [B, KH, L, D]
            values = torch.index_select(vp, 1, tables).view(KH, B, -1, D).transpose(0, 1)
            qq = q.view(B, KH, G, D).to(dt)
            return F.scaled_dot_product_attention(qq, keys, values, attn_mask=bias32.view(B, 1, 1, L).to(dt))
        def gather():
            return torch.index_select(kp, 1, tables), torch.index_select(vp, 1, tables)
        print(B, L, dt, "current %.2f ms" % bench(cur), "sdpa %.2f ms" % bench(sdpa), "gather only %.2f ms" % bench(gather))
