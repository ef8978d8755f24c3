"""What a pretraining run learns to predict: one object per `data.objective` (mlm, plm, clm)."""
