window.addEventListener('load',function(){var ok=0,bad=0,imgs=document.images,svgs=document.querySelectorAll('svg.figure');
for(var i=0;i<imgs.length;i++){if(imgs[i].complete&&imgs[i].naturalWidth>0)ok++;else bad++;}
for(var j=0;j<svgs.length;j++){var b=svgs[j].getBBox();if(b.width>0&&b.height>0)ok++;else bad++;}
document.body.setAttribute('data-figures',imgs.length+svgs.length);document.body.setAttribute('data-figures-ok',ok);document.body.setAttribute('data-figures-bad',bad);});
