"""Question-Formation data (McCoy, Frank & Linzen 2020): the grammar (:mod:`.grammar`), the fitted or published rule
probabilities (:mod:`.weights`, fitted by :mod:`.fit`), the generator (:mod:`.generate`), the download of McCoy's
files (:mod:`.download`), the exact entropy floor and real-data estimates (:mod:`.floor`), the comparison with the
real files (:mod:`.compare`) and tokenization into the token store (:mod:`.tokenize`).
"""
