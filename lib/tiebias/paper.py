"""Numbers reported by Lopardo et al. (2026), so every notebook can print "paper" beside "this run".

Values are transcribed from the paper's tables and figures (figure values are read off the plots and
are approximate): Lopardo, Harish, Arnett, Gupta, arXiv:2603.26663 (2026), and the logs of its public code
(github.com/AntonioLopardo/weight-tying-bias) where a note says so. Nothing here is computed.
"""

from __future__ import annotations

CITATION = ("Lopardo, Harish, Arnett, Gupta. Weight Tying Biases Token Embeddings Towards the Output "
            "Space. arXiv:2603.26663, 2026.")

# Table 1: mean cosine after alignment (identity, orthogonal, linear)
TABLE1: dict[str, dict[str, dict[str, float]]] = {
    "OLMo-1B": {
        "untied input -> untied output": {"identity": 0.012, "orthogonal": 0.440, "linear": 0.574},
        "untied output -> tied": {"identity": 0.014, "orthogonal": 0.669, "linear": 0.719},
        "untied input -> tied": {"identity": 0.001, "orthogonal": 0.420, "linear": 0.525},
    },
    "GPT-Neo / Pythia": {
        "untied input -> untied output": {"identity": -0.001, "orthogonal": 0.456, "linear": 0.518},
        "untied output -> tied": {"identity": 0.001, "orthogonal": 0.507, "linear": 0.637},
        "untied input -> tied": {"identity": 0.000, "orthogonal": 0.376, "linear": 0.507},
    },
}

# Table 5: KNN@10 overlap
TABLE5: dict[str, dict[str, float]] = {
    "OLMo-1B": {"tied vs untied input": 0.496, "tied vs untied output": 0.733, "untied input vs output": 0.455},
    "Qwen3": {"tied vs untied input": 0.366, "tied vs untied output": 0.712, "untied input vs output": 0.366},
    "GPT-Neo / Pythia": {"tied vs untied input": 0.372, "tied vs untied output": 0.408,
                         "untied input vs output": 0.611},
}

# Figure 2: tuned-lens KL (bits) at the input layer, read off the plot
FIG2_INPUT_LAYER_KL_BITS: dict[str, dict[str, float | tuple[float, float]]] = {
    "OLMo-1B": {"tied": (8.9, 9.2), "untied": 7.0},
    "GPT-Neo / Pythia": {"tied": 17.0, "untied": 7.0},
    "Qwen3": {"tied": 25.0, "untied": 12.0},
}

# Figure 3: cosine to initialisation at step 20k in OLMo-1B-0724 (untied)
FIG3_COS_TO_INIT = {"output": 0.56, "input": 0.87}

# Figure 4: output path's share of the embedding gradient over the first 1000 steps (tied OLMo-1B)
FIG4_OUTPUT_SHARE = {"quoted": 0.70, "reproduction_log_mean": 0.83, "median_out_in_ratio": 4.3}

# Figure 4's per-step log, published with the paper's code (AntonioLopardo/weight-tying-bias,
# experiments/5_gradient_flow/OLMo-1B-tied-no-scale-10000/gradient_provenance.csv: 10,010 steps, warmup 1,000,
# batch 512 x 4096 tokens, the last micro-batch of 8 sequences on one process logged). The mean over steps of
# out / (in + out), where "in" is the norm of the gradient on the embedding module's output (its proxy) and "out" the
# output projection's weight gradient; computed from the published file, per window and norm (l2: the paper's metric;
# squared_l2: out^2 / (in^2 + out^2); l1). Its "first 1000 steps" are its warmup.
FIG4_LOG_WINDOWS: dict[str, dict[str, float]] = {
    "l2": {"first 100 steps": 0.9024, "warmup": 0.7033, "after warmup": 0.6282, "whole run": 0.6357},
    "squared_l2": {"first 100 steps": 0.9861, "warmup": 0.8213, "after warmup": 0.7395, "whole run": 0.7477},
    "l1": {"first 100 steps": 0.7149, "warmup": 0.4294, "after warmup": 0.4413, "whole run": 0.4401},
}
FIG4_LOG_RUN = {"steps": 10010, "warmup_steps": 1000}
# The "83%" (FIG4_OUTPUT_SHARE["reproduction_log_mean"]) is an earlier log in the same repository
# (old_batch8_gradient_provenance.csv, commit 831b708): 1,010 steps, warmup 100, batch 8; the l2 share over its
# warmup (steps 1-100) and over the whole run, computed from that file.
FIG4_OLD_LOG = {"steps": 1010, "warmup_steps": 100, "l2": {"warmup": 0.909, "whole run": 0.813}}

# Tables 2 and 6: Procrustes mean cosine of the tied matrix vs the untied model at the same step
TABLE2_STEP10K = {1.0: {"vs untied input": 0.216, "vs untied output": 0.384},
                  5.0: {"vs untied input": 0.222, "vs untied output": 0.369}}
TABLE6_STEP1K = {1.0: {"vs untied input": 0.172, "vs untied output": 0.197},
                 2.0: {"vs untied input": 0.1725, "vs untied output": 0.197},
                 10.0: {"vs untied input": 0.173, "vs untied output": 0.190}}

# Table 7: WikiText-2 perplexity at step 10k
TABLE7_PPL = {1.0: 35.71, 5.0: 36.64}

# Figure 2, OLMo-1B: tuned-lens KL (bits) of the plotted points at the input layer (0) and layer 1
FIG2_OLMO_KL_BITS: dict[int, dict[str, float]] = {0: {"tied": 8.86, "untied": 7.01}, 1: {"tied": 9.61, "untied": 6.64}}

# How Figure 2's lenses were trained and read by the paper's public code (AntonioLopardo/weight-tying-bias,
# utils/tuned_lens_utils.py): the tuned-lens package's SGD recipe for 100 steps (the figure's title; the OLMo
# script uses 500 steps x 131,072 tokens), read with the reference protocol (tiebias.config.choices.LENS_PROTOCOLS).
FIG2_LENS = {"protocol": "reference", "recipe": "package", "steps": 100, "olmo_script_steps": 500,
             "olmo_script_tokens_per_step": 131072}
