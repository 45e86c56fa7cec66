"""The paper's own words: verbatim passages of Niu et al. (2024) stored in the package, one constant per claim
(a claim's registry record, :class:`assocmem.report.claims.registry.Claim`, names the passages it rests on).

The supplied paper text (``shared/paper`` beside the checkout, never read by the product) comes in two forms:
``niu2024_latex_source.txt``, a rendering of the LaTeX source in which every formula appears three times
(Unicode glyphs, the LaTeX source, a spoken form), and ``niu2024_pdf_text.txt``, a text extraction of the PDF
with formulas as ``$...$`` LaTeX. Each :class:`Quote` holds a passage of both, copied character for
character. A quote may skip text: its fragments are joined by :data:`ELLIPSIS`, and each fragment occurs
verbatim, in order, in its source (whitespace aside); for the LaTeX source the fragments keep the LaTeX form of
each formula and drop its Unicode and spoken copies. ``note`` says how the two texts differ where they do.
The quote tests (``tests/unit/report/test_quotes.py``) check every fragment of every registered claim against
both files.

Section and equation numbers are those of the supplied text: Sec. 6 holds the experiments, App. B the energy
properties (B.1 proves Prop. 2), App. C the proofs of Sec. 5 (C.1 Prop. 4, C.2 eq. (12) and Lemma 5), App. D
the GPT-2 parameter count; eq. (12) is Z_t as a sum of ball integrals, eq. (13) the bounds on Z_t, eq. (14)
the proof of Prop. 4.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

ELLIPSIS = " [...] "
PAPER_TABLE2_MODELS = ("Transformer", "Chinchilla", "PaLM 2", "GPT-2", "MiniCPM")
PAPER_SAMPLE_SIZE = 80_000  # Sec. 6.1: "We randomly sample 80K chunks of 256 tokens"
PAPER_CHUNK_TOKENS = 256


@dataclass(frozen=True)
class Quote:
    where: str
    latex_source: str
    pdf: str | None
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"where": self.where, "latex_source": self.latex_source, "pdf": self.pdf}
        if self.note:
            out["note"] = self.note
        return out


PROP1 = (
    Quote("§4, Proposition 1",
          r"Proposition 1 [...] Given [...] \mathcal{D}=\{\rho_{1}\ldots,\rho_{d}\}, [...] the proposed energy [...] "
          r"satisfies [...] g(x)-\log d\leq E(x)\leq g(x).",
          r"Proposition 1 *Given $\mathcal{D} = \{\rho_1 \dots, \rho_d\}$, the proposed energy $E(x)$ satisfies* "
          r"[...] $$g(x) - \log d \leq E(x) \leq g(x).$$"),
    Quote("§4, eqs. (3)-(4) and the choice of distance",
          r"g(x):=\min_{1\leq i\leq d}d(x,\rho_{i}) [...] In the sequel, we use the squared Euclidean 2-norm [...] "
          r"d(x,y)=\|x-y\|^{2} [...] for simplicity, although other norms could be used in general. [...] "
          r"E(x)=-\log\left(\sum_{i=1}^{n}\exp(-d(x,\rho_{i}))\right).",
          r"$$g(x) := \min_{1 \leq i \leq d} d(x, \rho_i), \quad (3)$$ [...] In the sequel, we use the squared "
          r"Euclidean 2-norm $d(x, y) = \|x - y\|^2$ for simplicity, although other norms could be used in general. "
          r"[...] $$E(x) = -\log \left(\sum_{i=1}^n \exp(-d(x, \rho_i)) \right). \quad (4)$$",
          "Both texts sum to n in (4), where the number of patterns is d."),
)

PROP2 = (
    Quote("§4, Proposition 2",
          r"Proposition 2 [...] Let [...] \beta=2 [...] we have [...] |E(x)-(2E_{\mathrm{MCHN}}^{\beta=2}(x)-\log d)|"
          r"\leq\max_{1\leq i\leq d}\|\rho_% {i}\|^{2}-\min_{1\leq i\leq d}\|\rho_{i}\|^{2}.",
          r"Proposition 2 *Let $\beta = 2$ we have* [...] $$|E(x) - (2E_{\text{MCHN}}^{\beta=2}(x) - \log d)| \leq "
          r"\max_{1 \leq i \leq d} \|\rho_i\|^2 - \min_{1 \leq i \leq d} \|\rho_i\|^2.$$"),
    Quote("App. B.1, proof of Proposition 2, last step",
          r"B.1 Proof of Proposition 2 [...] \xi=\max_{1\leq i\leq d}\|\rho_{i}\|, [...] Therefore, due to Lemma 4, "
          r"we have [...] \displaystyle\leq\max_{1\leq i\leq d}|\|\rho_{i}\|^{2}-\xi^{2}|=\max_{1\leq i% \leq d}"
          r"\|\rho_{i}\|^{2}-\min_{1\leq i\leq d}\|\rho_{i}\|^{2}.",
          r"B.1 Proof of Proposition 2 [...] Let $\xi = \max_{1 \leq i \leq d} \|\rho_i\|$ [...] Therefore, due to "
          r"Lemma 4, we have [...] &\leq \max_{1 \leq i \leq d} \|\rho_i\|^2 - \xi^2 = \max_{1 \leq i \leq d} "
          r"\|\rho_i\|^2 - \min_{1 \leq i \leq d} \|\rho_i\|^2.",
          "The texts differ. The LaTeX source bounds by max_i |‖ρ_i‖² − ξ²| = ξ² − min_i ‖ρ_i‖², which is right. "
          "The PDF text has no absolute value: max_i ‖ρ_i‖² − ξ² = 0, which would claim a deviation of at most 0 "
          "and is false whenever the norms differ; the step must read ξ² − min_i ‖ρ_i‖²."),
)

PROP3 = (
    Quote("§4, Proposition 3",
          r"The following result follows directly from the above inequalities. [...] Proposition 3 [...] "
          r"\min_{1\leq i\leq d}\|\rho_{i}\|^{2}-\max_{1\leq i\leq d}\|\rho_{i}\|^{2}\leq g% (x)-2E_{\mathrm{MCHN}}"
          r"^{\beta=2}(x)\leq\max_{1\leq i\leq d}\|\rho_{i}\|^{2}-% \min_{1\leq i\leq d}\|\rho_{i}\|^{2}+\log d.",
          r"The following result follows directly from the above inequalities. [...] Proposition 3 [...] "
          r"$$\min_{1 \leq i \leq d} \|\rho_i\|^2 - \max_{1 \leq i \leq d} \|\rho_i\|^2 \leq g(x) - "
          r"2E_{\text{MCHN}}^{\beta=2}(x) \leq \max_{1 \leq i \leq d} \|\rho_i\|^2 - \min_{1 \leq i \leq d} "
          r"\|\rho_i\|^2 + \log d.$$"),
)

EQ8 = (
    Quote("§4.1, eqs. (7)-(8)",
          r"Therefore, we define a global energy function [...] E_{\mathrm{global}}(x):=-\mathrm{LogSumExp}((-E_{1}"
          r"(x),-E_{2}(x),\ldots,-E_{l}% (x))). [...] (7) [...] According to Lemma 3, we have [...] "
          r"\min_{1\leq i\leq l}E_{i}(x)-\log l\leq E_{\mathrm{global}}(x)<\min_{1\leq i% \leq l}E_{i}(x). [...] (8)",
          r"Therefore, we define a global energy function [...] $$E_{\text{global}}(x) := -\text{LogSumExp}((-E_1(x), "
          r"-E_2(x), \dots, -E_l(x))). \quad (7)$$ [...] According to Lemma 3, we have [...] $$\min_{1 \leq i \leq l} "
          r"E_i(x) - \log l \leq E_{\text{global}}(x) < \min_{1 \leq i \leq l} E_i(x). \quad (8)$$"),
    Quote("§4.1, the layer energy",
          r"Then, the energy function for each layer can be written as [...] "
          r"E_{t}(x)=\frac{1}{Z_{t}}\exp(-g_{t}(x)),",
          r"Then, the energy function for each layer can be written as [...] "
          r"$$E_t(x) = \frac{1}{Z_t} \exp(-g_t(x)), \quad \text{where } g_t(x) := \min_{1 \leq j \leq d} "
          r"d(x, \rho^{tj}).$$"),
    Quote("§5, eq. (10)",
          r"E_{\mathrm{global}}(x)=E_{t}(x)-\log l+c(x), [...] (10) [...] We further assume that [...] "
          r"c(x)=c\in[0,\log l) [...] is constant.",
          r"$$E_{\text{global}}(x) = E_t(x) - \log l + c(x), \quad (10)$$ [...] We further assume that "
          r"$c(x) = c \in [0, \log l]$ is constant.",
          "The LaTeX source has the half-open interval [0, log l); the PDF text has the closed [0, log l]."),
)

EQ12 = (
    Quote("§5, eq. (12)",
          r"Next, we take a closer look at the layer partition function. [...] \displaystyle=\sum_{i=1}^{d}"
          r"\int_{x\in B_{t_{i}}}\exp(-\|x-\rho^{t_{i}}\|^{2})% \ \mathrm{d}x\stackrel{{\scriptstyle(c)}}{{=}}2\sum_"
          r"{i=1}^{d}\pi^{\frac{n}{2}}% \frac{\gamma(n,r_{i})}{\Gamma(\frac{n}{2})} [...] (12)",
          r"Next, we take a closer look at the layer partition function. [...] &= \sum_{i=1}^d \int_{x \in B_{t_i}} "
          r"\exp(-\|x - \rho^{t_i}\|^2) \, dx \stackrel{(c)}{=} 2 \sum_{i=1}^d \pi^{\frac{n}{2}} "
          r"\frac{\gamma(n, r_i)}{\Gamma(\frac{n}{2})} \end{aligned} \quad (12)$$"),
    Quote("App. C.2, the last two steps and the definition of γ",
          r"\gamma(n,r)=\int_{0}^{r}t^{n-1}e^{-t}\ \mathrm{d}t [...] "
          r"\displaystyle=\frac{2\pi^{\frac{n}{2}}}{\Gamma(\frac{n}{2})}\int_{0}^{r_{i}}t^% {n-1}e^{-t^{2}}\ "
          r"\mathrm{d}t [...] \displaystyle=2\pi^{\frac{n}{2}}\frac{\gamma(n,r_{i})}{\Gamma(\frac{n}{2})}",
          r"$$\gamma(n, r) = \int_0^r t^{n-1} e^{-t} dt, [...] &= \frac{2\pi^{\frac{n}{2}}}{\Gamma(\frac{n}{2})} "
          r"\int_0^{r_i} t^{n-1} e^{-t^2} dt \\ &= 2\pi^{\frac{n}{2}} \frac{\gamma(n, r_i)}{\Gamma(\frac{n}{2})}"),
)

LEMMA5 = (
    Quote("App. C.2, Lemma 5",
          r"Lemma 5 [...] The incomplete gamma function [...] satisfies [...] "
          r"e^{-r}\frac{r^{n}}{n}\leq\gamma(n,r)\leq\frac{r^{n}}{n}",
          r"Lemma 5 *The incomplete gamma function $\gamma(n, r)$ satisfies* [...] "
          r"$$e^{-r} \frac{r^n}{n} \leq \gamma(n, r) \leq \frac{r^n}{n}$$"),
    Quote("§5, the ball bounds and eq. (13)",
          r"According to Lemma 5, we have [...] e^{-r_{i}}V_{n}(r_{i})\leq 2\pi^{\frac{n}{2}}\frac{\gamma(n,r_{i})}"
          r"{\Gamma(% \frac{n}{2})}=\int_{x\in B_{i}}\exp(-\|x-\rho^{i}\|^{2})\ \mathrm{d}x\leq V_{n% }(r_{i}), [...] "
          r"to Eq. (5), we get [...] \frac{d\cdot V_{n}(\sqrt{\frac{n}{2\pi e}})}{\exp(\sqrt{\frac{n}{2\pi e}})}% "
          r"\leq Z_{t}\leq d\cdot V_{n}(\sqrt{\frac{n}{2\pi e}}).",
          r"According to Lemma 5, we have [...] $$e^{-r_i} V_n(r_i) \leq 2\pi^{\frac{n}{2}} \frac{\gamma(n, r_i)}"
          r"{\Gamma(\frac{n}{2})} = \int_{x \in B_i} \exp(-\|x - \rho^i\|^2) \, dx \leq V_n(r_i),$$ [...] "
          r"to Eq. (12), we get [...] $$\frac{d \cdot V_n\left(\sqrt{\frac{n}{2\pi e}}\right)}{\exp\left("
          r"\sqrt{\frac{n}{2\pi e}}\right)} \leq Z_t \leq d \cdot V_n\left(\sqrt{\frac{n}{2\pi e}}\right). "
          r"\quad (13)$$",
          "The LaTeX source says r* is brought 'to Eq. (5)', the PDF text 'to Eq. (12)'."),
)

RADIUS = (
    Quote("§5, the radius r*",
          r"For [...] to have a volume of [...] O(1) [...] , the radius [...] must be approximately [...] "
          r"\sqrt{\frac{n}{2\pi e}} [...] asymptotically.",
          r"For $V_n(r)$ to have a volume of $O(1)$, the radius r must be approximately $\sqrt{\frac{n}{2\pi e}}$ "
          r"asymptotically."),
    Quote("§3, the dimension n",
          r"so each input sequence has [...] n=T_{\mathrm{max}}d_{\mathrm{emb}} [...] dimensions.",
          r"so each input sequence has $n = T_{\max} d_{\text{emb}}$ dimensions."),
    Quote("§6.1, Figure 2 caption",
          r"Figure 2: Nearest neighbor distances of output activations using [...] of the output. The mean and "
          r"median of the distances are all around 20, which is approximately [...] 2\sqrt{n/2\pi e} [...] "
          r"as hypothesized.",
          r"Figure 2: Nearest neighbor distances of output activations using 25%, 50%, 75%, and 100% of the "
          r"output. The mean and median of the distances are all around 20, which is approximately "
          r"$2\sqrt{n/2\pi e}$ as hypothesized."),
    Quote("§6.1, the measurement",
          r"We randomly sample [...] K chunks of [...] tokens from the dataset. [...] For each sample chunk, we "
          r"record the activation vector of the last layer for prediction of the next token. [...] In all these "
          r"cases, the mean and median are approximately 20, so that a typical [...] B_{i} [...] of pattern "
          r"[...] \rho^{i} [...] has radius [...] This corroborates our theory in Eq. (13) in Section 5, according "
          r"to which the radius is of order [...] \sqrt{\frac{n}{2\pi e}}=\sqrt{\frac{1024}{2\pi e}}=7.74. [...] "
          r"Note that the activation is only collected for [...] of the documents, the estimated radius may be "
          r"greater than actual one in the model.",
          r"We randomly sample 80K chunks of 256 tokens from the dataset. [...] For each sample chunk, we record the "
          r"activation vector of the last layer for prediction of the next token. [...] In all these cases, the "
          r"mean and median are approximately 20, so that a typical B_i of pattern ρ^i has radius 10. This "
          r"corroborates our theory in Eq. (13) in Section 5, according to which the radius is of order "
          r"$\sqrt{\frac{n}{2\pi e}} = \sqrt{\frac{1024}{2\pi e}} = 7.74$. Note that the activation is only "
          r"collected for 1% of the documents, the estimated radius may be greater than actual one in the model."),
)

PROP4 = (
    Quote("§5, Proposition 4",
          r"Proposition 4 [...] be the cross-entropy loss of the above model, then [...] "
          r"1<L=\log Z_{t}+\frac{1}{Z_{t}}+\log l-c\leq\log Z_{t}+\frac{1}{Z_{t}}+\log l, [...] where [...] "
          r"c\in[0,\log l).",
          r"Proposition 4 *Let L be the cross-entropy loss of the above model, then* [...] $$1 < L = \log Z_t + "
          r"\frac{1}{Z_t} + \log l - c \leq \log Z_t + \frac{1}{Z_t} + \log l,$$ [...] where $c \in [0, \log l]$.",
          "The LaTeX source has c in [0, log l), the PDF text c in [0, log l]."),
    Quote("App. C.1, proof of Proposition 4, steps (a)-(b)",
          r"\stackrel{{\scriptstyle(a)}}{{=}}\log Z_{\theta}+\frac{1}{Z_{t}}+% \log l\ \stackrel{{\scriptstyle(b)}}"
          r"{{=}}\ \log Z_{t}+\frac{1}{Z_{t}}+\log l-c [...] (14) [...] is because [...] g(\rho^{\sigma(i)})=0, "
          r"[...] is due to Eq. (10), where we have",
          r"&\stackrel{(a)}{=} \log Z_\theta + \frac{1}{Z_t} + \log l \stackrel{(b)}{=} \log Z_t + \frac{1}{Z_t} + "
          r"\log l - c \end{aligned} \tag{14}$$ [...] where (a) is because $g(\rho^{\sigma(i)}) = 0$, and (b) is "
          r"due to Eq. (10), where we have"),
    Quote("§5, after Proposition 4",
          r"which substantiates our theory that [...] L(N,D)\approx\log Z_{t}+\frac{1}{Z_{t}}\geq 1, [...] "
          r"with minimum obtained when",
          r"which substantiates our theory that $L(N, D) \approx \log Z_t + \frac{1}{Z_t} \geq 1$, with minimum "
          r"obtained when $Z_t = 1$."),
)

PARAMS = (
    Quote("§3, the parameter count",
          r"Then [...] N\approx Ald_{\mathrm{emb}}^{2}=\frac{Ald_{\mathrm{emb}}}{T_{\mathrm{max}}}n [...] "
          r"for some constant",
          r"Then $N \approx A d_{\text{emb}}^2 = \frac{A d_{\text{emb}}}{T_{\max}} n$ for some constant A",
          "The PDF text drops the layer count l: N ≈ A d_emb² instead of the LaTeX source's N ≈ A l d_emb²."),
    Quote("App. D, GPT-2 medium",
          r"The number of parameters in the multi-head attention layer is [...] =3ld_{% \mathrm{emb}}^{2}=75,497,472. "
          r"[...] The number of parameters in the dense weights and layer normalization is [...] "
          r"and the number of parameters in the feed-forward weight matrices and bias is [...] with [...] "
          r"d_{\mathrm{FF}}=3072=3d_{\mathrm{emb}}. [...] with some constant [...] A\approx 15 [...] in this case.",
          r"The number of parameters in the multi-head attention layer is $l \cdot n_h \cdot (3 \cdot d_{\text{emb}} "
          r"\cdot d_{\text{emb}}/n_h) = 3ld_{\text{emb}}^2 = 75,497,472$. The number of parameters in the dense "
          r"weights and layer normalization is $l(d_{\text{emb}}^2 + 2d_{\text{emb}}) = ld_{\text{emb}}^2 + "
          r"2ld_{\text{emb}} = 25,214,976$, and the number of parameters in the feed-forward weight matrices and "
          r"bias is $l(2d_{\text{emb}} \cdot d_{\text{FF}} + d_{\text{emb}} + d_{\text{FF}}) = 6ld_{\text{emb}}^2 + "
          r"4ld_{\text{emb}} = 151,093,248$, with $d_{\text{FF}} = 3072 = 3d_{\text{emb}}$. [...] "
          r"$N \approx Ald_{\text{emb}}^2$ with some constant $A \approx 15$ in this case."),
)

SCALING = (
    Quote("§5, after eq. (13)",
          r"In Section 3, we argue that [...] Therefore, for [...] to reach [...] we need [...] N=O(D^{2}).",
          r"In Section 3, we argue that [...] Therefore, for Z_t to reach $Z_t = 1$, we need $N = O(D^2)$."),
    Quote("§6.2",
          r"Since the model size is about the order [...] O(D^{2}) [...] when trained on 90M tokens, the model can "
          r"achieve similar training loss and validation loss compared to the setting with 9B tokens.",
          r"Since the model size is about the order $O(D^2)$ when trained on 90M tokens, the model can achieve "
          r"similar training loss and validation loss compared to the setting with 9B tokens."),
)

MEMORISATION = (
    SCALING[0],
    Quote("§3.1, Assumption 1",
          r"Assumption 1 [...] After saturation, the model memorizes the training samples [...] \mathcal{D} [...] as "
          r"patterns [...] \{\rho^{1},\rho^{2},\ldots,\rho^{d}\}, [...] where [...] \rho^{i}\in\mathbb{R}^{n} "
          r"[...] for [...] i=1,2,\ldots,d.",
          r"Assumption 1 After saturation, the model memorizes the training samples \mathcal{D} as patterns $\{\rho^1, "
          r"\rho^2, \dots, \rho^d\}$, where $\rho^i \in \mathbb{R}^n$ for $i = 1, 2, \dots, d$."),
)

LOSS_FLOOR = (
    Quote("Abstract",
          r"Under specific conditions, we show that the minimum achievable cross-entropy loss is bounded from below "
          r"by a constant approximately equal to 1.",
          r"Under specific conditions, we show that the minimum achievable cross-entropy loss is bounded from below "
          r"by a constant approximately equal to 1."),
    Quote("§6.3, Figure 4 caption and text",
          r"Figure 4: Vanilla Transformers trained on the 2M Question-Formation dataset following the settings in "
          r"(Murty et al., 2023). The training losses stabilize at a value of approximately 1, which corroborates "
          r"the result presented in Proposition 4. [...] where the losses stabilize at a value of around 1 as "
          r"predicted in Proposition 4.",
          r"Figure 4: Vanilla Transformers trained on the 2M Question-Formation dataset following the settings in "
          r"(Murty et al., 2023). The training losses stabilize at a value of approximately 1, which corroborates "
          r"the result presented in Proposition 4. [...] where the losses stabilize at a value of around 1 as "
          r"predicted in Proposition 4."),
    Quote("§5, Remark 2",
          r"When the model is severely over-parameterized, the energy function can well approximate the energy of "
          r"the sample distribution. In this case, the minimal cross-entropy equals the entropy of the training "
          r"samples.",
          r"When the model is severely over-parameterized, the energy function can well approximate the energy of "
          r"the sample distribution. In this case, the minimal cross-entropy equals the entropy of the training "
          r"samples."),
    replace(PROP4[0], where="§5 (Cross-Entropy Loss), Proposition 4 (its display carries no equation number)"),
)

OVERFIT = (
    Quote("§6.2",
          r"The training with [...] (9M) of the OpenWebText data clearly experiences over-fitting, and the "
          r"training loss vanishes over iterations.",
          r"The training with 0.1% (9M) of the OpenWebText data clearly experiences over-fitting, and the training "
          r"loss vanishes over iterations."),
    Quote("§7, Conclusion",
          r"Additionally, the performance of these models can be compromised by both early and delayed stopping.",
          r"Additionally, the performance of these models can be compromised by both early and delayed stopping."),
)

LITERATURE = (
    Quote("§2, the Chinchilla fit of eq. (2)",
          r"For Chinchilla models, the fitted parameters are (Hoffmann et al., 2022a) [...] "
          r"\alpha=0.34,\quad\beta=0.28,\quad E=1.61,\quad A=406.4,\quad B=410.7.",
          r"For Chinchilla models, the fitted parameters are (Hoffmann et al., 2022a) [...] "
          r"$$\alpha = 0.34, \quad \beta = 0.28, \quad E = 1.61, \quad A = 406.4, \quad B = 410.7.$$"),
    Quote("§5 and App. A, Table 2",
          r"In Table 2 in Appendix A, we compare the reported cross-entropy loss of various transformer-based "
          r"models in the literature. [...] Nevertheless, the losses all satisfy [...] L>1. [...] Table 2: Large "
          r"transformer-based language models and their reported cross-entropy loss.",
          r"In Table 2 in Appendix A, we compare the reported cross-entropy loss of various transformer-based "
          r"models in the literature. [...] Nevertheless, the losses all satisfy $L > 1$. [...] Table 2: Large "
          r"transformer-based language models and their reported cross-entropy loss."),
)

FIG1 = (
    Quote("§4, Figure 1 caption",
          r"Figure 1: Left: Energy landscapes for a set of 2-dimensional patterns [...] (a) The negative LogSumExp "
          r"function with [...] as an extension of (Demircigil et al., 2017). (b) The regularization terms [...] "
          r"in the MCHN energy. (c) The MCHN energy [...] (d) The proposed energy Eq. (4) with squared Euclidean "
          r"norm. Right: Energy landscapes for a set of 1-dimensional patterns",
          r"Figure 1: **Left:** Energy landscapes for a set of 2-dimensional patterns $\mathcal{D} = \{(-2, -0.5), "
          r"(0.2, -0.3), (1.5, 1.5)\}$. (a) The negative LogSumExp function with $\beta = 1$, as an extension of "
          r"(Demircigil et al., 2017). (b) The regularization terms $\frac{1}{2}x^T x + \beta^{-1} \log d + "
          r"\frac{\max_i \|x_i\|^2}{2}$ in the MCHN energy. (c) The MCHN energy $E_{\text{MCHN}}^1(x)$. (d) The "
          r"proposed energy Eq. (4) with squared Euclidean norm. **Right:** Energy landscapes for a set of "
          r"1-dimensional patterns $\mathcal{D} = \{-2, 0, 1\}$."),
    Quote("§4, on convexity",
          r"The MCHN energy then adds regularization terms to create a convex energy function.",
          r"The MCHN energy then adds regularization terms to create a convex energy function."),
)
