"""Terminal presentation of results (text only; computes nothing new). HTML is roofline.reports."""
