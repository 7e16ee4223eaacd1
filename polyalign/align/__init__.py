"""Word alignment from encoder hidden states: OT (XLM-Align §3.1), SimAlign argmax/itermax, awesome-align softmax,
AER, baselines.

transport.py  f_sim and log-space Sinkhorn (Eqs. 1-6)
extract.py    argmax both ways, iterative filtering (Eqs. 7-9), SimAlign itermax, awesome-align's thresholded
              softmaxes and link probabilities, the method switch
words.py      each side's tokens out of a layout, subword links lifted to word links, Pharaoh lines
aligner.py    the Aligner: word-split sentence pairs in, word links out, one encoder call per batch
aer.py        AER with sure/possible links, gold folders
bitext.py     a user's bitext for `polyalign align`: two files or `source ||| target` lines, checked whole first
"""
