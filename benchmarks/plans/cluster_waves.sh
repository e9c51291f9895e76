. benchmarks/plans/common.sh
C4="strategy=relay,vec=4,pe=8192,writers=true,ring=2,ramp=2"
C8="strategy=relay,vec=8,pe=16384,writers=true,ring=2,ramp=1"
probe gn32w 150 --only "=group_norm [1,512,128,128] fp32" --only "=group_norm [2,1536,64,64] fp32" \
  --params "$C4,nw=8,k=7,cs=8,ncl=15" --params "$C4,nw=8,k=7,cs=8,ncl=14" --params "$C4,nw=8,k=7,cs=8,ncl=8" \
  --params "$C4,nw=4,k=7,cs=16,ncl=7" --params "$C4,nw=4,k=7,cs=16,ncl=6" --params "$C4,nw=8,k=7,cs=4,ncl=32"
probe sm16w 80 --only "=softmax [64,262144] bf16" \
  --params "$C8,nw=8,k=6,cs=4,ncl=32" --params "$C8,nw=8,k=6,cs=4,ncl=30" --params "$C8,nw=8,k=6,cs=8,ncl=15" \
  --params "$C8,nw=8,k=6,cs=8,ncl=14" --params "$C8,nw=8,k=6,cs=16,ncl=7" --params "$C8,nw=8,k=6,cs=8,ncl=8"

W4="strategy=relay,vec=4,pe=8192,nc=1,k=7,ramp=2,writers=true"
probe gnw 90 --only "=group_norm [2,1536,64,64] fp32" --only "=group_norm [1,512,128,128] fp32" \
  --params "$W4,nw=4" --params "$W4,nw=8" --params "$W4,nw=4" --params "$W4,nw=8" --params "$W4,nw=4"
collect waves
